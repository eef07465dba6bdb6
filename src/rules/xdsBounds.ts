/**
 * What one xDS update may expand to, counted on its wire bytes before anything is decoded. A
 * RateLimitConfig of 4 MiB can hold a million nested metadata values, which protobufjs, then the
 * document a rules file would give, then the reader turn into hundreds of megabytes and tens of
 * seconds of work. So the messages inside each resource are counted first, walking the protobuf
 * wire format by the schema below without building anything, and an update over a bound is
 * refused with the bound it broke.
 */
import protobuf from 'protobufjs';
import { RulesError } from '../core/errors.js';

/**
 * Descriptors per update, at every depth: what loads in the loader's heap (LOAD_HEAP_MB, 384 MB).
 * An update of 100,000 descriptors, a third of them with metadata (the most metadata values
 * allowed), peaked at about 290 MB of it; 150,000 at 370 MB, and 200,000 ran it out. Richer
 * descriptors meet the reader's bound of a million YAML nodes first (MAX_EXPANDED_NODES): 90,000
 * with a named limit and a replaces entry each, a third with metadata, peaked at about 370 MB,
 * and 95,000 were refused at that bound. The largest rules file allowed holds about 54,000 rules.
 */
export const MAX_XDS_DESCRIPTORS = 100_000;
/** Values in the descriptors' metadata (each Struct, list and value), per update. */
export const MAX_XDS_METADATA_VALUES = 100_000;
/**
 * Entries in the rate limits' `replaces` lists, per update. Each is a message of its own, two
 * bytes on the wire at the least: unbounded, 4 MiB of them would be two million.
 */
export const MAX_XDS_REPLACES = 100_000;
/**
 * How deep messages may nest, descriptors in descriptors and metadata in metadata: a request
 * has at most 16 entries, so deeper rules could never match, and building them would only
 * spend the stack.
 */
export const MAX_XDS_DEPTH = 128;

/** The messages the walk knows: which field of each holds which message. */
const CONFIG = 0;
const DESCRIPTOR = 1;
const POLICY = 2;
const STRUCT = 3;
const FIELDS_ENTRY = 4;
const VALUE = 5;
const LIST = 6;
const REPLACE = 7;
type Kind = number;

const FIELDS: Readonly<Record<Kind, Readonly<Record<number, Kind>>>> = {
  [CONFIG]: { 3: DESCRIPTOR },
  [DESCRIPTOR]: { 3: POLICY, 4: DESCRIPTOR, 8: STRUCT },
  [POLICY]: { 5: REPLACE },
  [STRUCT]: { 1: FIELDS_ENTRY },
  [FIELDS_ENTRY]: { 2: VALUE },
  [VALUE]: { 5: STRUCT, 6: LIST },
  [LIST]: { 1: VALUE },
};
const METADATA = new Set<Kind>([STRUCT, FIELDS_ENTRY, VALUE, LIST]);
/** RateLimitConfig.name: field 1, length-delimited. */
const NAME_TAG = (1 << 3) | 2;

/** Counts left for the rest of the update. */
export interface XdsBudget {
  descriptors: number;
  metadataValues: number;
  replaces: number;
}

export function xdsBudget(): XdsBudget {
  return {
    descriptors: MAX_XDS_DESCRIPTORS,
    metadataValues: MAX_XDS_METADATA_VALUES,
    replaces: MAX_XDS_REPLACES,
  };
}

/**
 * Walks one RateLimitConfig's bytes and takes what it holds from `budget`; throws RulesError,
 * naming the bound and the resource (`RateLimitConfig 'NAME'`, or `where` before its name is
 * read), when it holds more. Malformed bytes are left for the decoder to refuse.
 */
export function countXdsResource(bytes: Uint8Array, where: string, budget: XdsBudget): void {
  const label = { text: where };
  // Pending messages as (start, end, kind, depth), an explicit stack: metadata can nest deeper
  // than the JavaScript stack goes.
  const pending: number[] = [0, bytes.length, CONFIG, 0];
  while (pending.length > 0) {
    const depth = pending.pop() as number;
    const kind = pending.pop() as Kind;
    const end = pending.pop() as number;
    const start = pending.pop() as number;
    const fields = FIELDS[kind];
    if (fields === undefined) continue;
    const reader = protobuf.Reader.create(bytes.subarray(start, end));
    try {
      while (reader.pos < reader.len) {
        const tag = reader.uint32();
        const wireType = tag & 7;
        if (kind === CONFIG && tag === NAME_TAG) {
          label.text = `RateLimitConfig '${reader.string()}'`;
          continue;
        }
        const inner = fields[tag >>> 3];
        if (inner === undefined || wireType !== 2) {
          reader.skipType(wireType);
          continue;
        }
        const length = reader.uint32();
        const at = start + reader.pos;
        if (reader.pos + length > reader.len) return; // truncated: the decoder says so
        reader.pos += length;
        take(inner, depth + 1, label.text, budget);
        pending.push(at, at + length, inner, depth + 1);
      }
    } catch (error) {
      if (error instanceof RulesError) throw error;
      return; // not a valid message: the decoder refuses it with its own words
    }
  }
}

function take(kind: Kind, depth: number, where: string, budget: XdsBudget): void {
  if (depth > MAX_XDS_DEPTH) {
    throw new RulesError(
      `${where}: nests deeper than ${MAX_XDS_DEPTH} messages (descriptors and their metadata)`,
    );
  }
  if (kind === DESCRIPTOR && --budget.descriptors < 0) {
    throw new RulesError(
      `${where}: the update holds more than ${MAX_XDS_DESCRIPTORS} descriptors, counting every level`,
    );
  }
  if (kind === REPLACE && --budget.replaces < 0) {
    throw new RulesError(
      `${where}: the update's rate limits list more than ${MAX_XDS_REPLACES} entries in their replaces`,
    );
  }
  if (!METADATA.has(kind)) return;
  if (--budget.metadataValues < 0) {
    throw new RulesError(
      `${where}: the update's descriptor metadata holds more than ${MAX_XDS_METADATA_VALUES} values (structs, lists and their members)`,
    );
  }
}
