/**
 * The hot path's wire codec: the RLS request straight into a validated `Check`, and a `Decision`
 * straight into response bytes, skipping proto-loader's generic object conversion.
 */
import { isUtf8 } from 'node:buffer';
import protobuf from 'protobufjs';
import type { Check, Decision, Descriptor, OverrideUnit, ReportedUnit } from '../../core/check.js';
import type { JsonValue } from '../../rules/types.js';
import { InvalidRequestError } from '../../core/errors.js';
import { loadProtoRoot } from '../../core/protos.js';

export interface RequestLimits {
  maxDescriptors: number;
  maxEntries: number;
  maxEntryBytes: number;
  /** LIMIT_OVERRIDES_ENABLED: false refuses a descriptor's `limit`. Allowed unless false. */
  limitOverrides?: boolean;
  /** COMPAT_MODE=reference: a descriptor without entries is allowed (it matches no rule). */
  emptyDescriptors?: boolean;
}

/** grpc-js answers INTERNAL when a deserializer throws, so a bad request is a value instead. */
export type DecodedRequest = { ok: true; check: Check } | { ok: false; error: InvalidRequestError };

export interface ResponseHeader {
  key: string;
  value: string;
}

const responseType = loadProtoRoot('strings').lookupType(
  'envoy.service.ratelimit.v3.RateLimitResponse',
);
const structType = loadProtoRoot('strings').lookupType('google.protobuf.Struct');

/** A uint64 as protobufjs reads it: two unsigned 32-bit halves. */
interface WireLong {
  low: number;
  high: number;
}

const overrideUnits: readonly (OverrideUnit | undefined)[] = [
  undefined,
  ...(['second', 'minute', 'hour', 'day', 'month', 'year'] as const),
];
// Tags (field number << 3 | wire type: 0 varint, 2 length-delimited) of RateLimitRequest,
// RateLimitDescriptor, its Entry, RateLimitOverride and UInt64Value.
const DOMAIN_TAG = (1 << 3) | 2;
const DESCRIPTORS_TAG = (2 << 3) | 2;
const HITS_ADDEND_TAG = 3 << 3;
const ENTRIES_TAG = (1 << 3) | 2;
const LIMIT_TAG = (2 << 3) | 2;
const DESCRIPTOR_HITS_TAG = (3 << 3) | 2;
const IS_NEGATIVE_HITS_TAG = 4 << 3;
const KEY_TAG = (1 << 3) | 2;
const VALUE_TAG = (2 << 3) | 2;
const REQUESTS_PER_UNIT_TAG = 1 << 3;
const UNIT_TAG = 2 << 3;
const UINT64_VALUE_TAG = 1 << 3;
// Wire type by field number, for the fields each message knows.
const REQUEST_WIRE_TYPES = [-1, 2, 2, 0];
const DESCRIPTOR_WIRE_TYPES = [-1, 2, 2, 2, 0];
const ENTRY_WIRE_TYPES = [-1, 2, 2];
const LIMIT_WIRE_TYPES = [-1, 0, 0];
const UINT64_VALUE_WIRE_TYPES = [-1, 0];
const EMPTY = new Uint8Array(0);

export function createRequestDecoder(limits: RequestLimits): (bytes: Buffer) => DecodedRequest {
  return (bytes) => {
    try {
      return { ok: true, check: decodeRequest(bytes, limits) };
    } catch (error) {
      if (error instanceof InvalidRequestError) return { ok: false, error };
      const reason = error instanceof Error ? error.message : String(error);
      return { ok: false, error: new InvalidRequestError(`malformed request: ${reason}`) };
    }
  };
}

/** A descriptor as it came off the wire, before its text is checked. */
interface WireDescriptor {
  entries: { key: Uint8Array; value: Uint8Array }[];
  /** Entries on the wire: more than `entries` holds when it is over MAX_ENTRIES. */
  entryCount: number;
  limit: { requestsPerUnit: number; unit: number } | undefined;
  hitsAddend: WireLong | undefined;
  isNegativeHits: boolean;
  /** A fault inside an entry, the limit or the cost, reported after the counts. */
  inner?: Error;
}

/**
 * Reads the request in one pass, then checks it. The pass reads the descriptors within the
 * bounds and only counts (skips) the others, so an oversized request costs no allocation. What
 * is wrong is reported in a fixed order, whatever the order of the fields: the request's own
 * framing, then its counts, then the framing inside a descriptor's parts, then its values.
 */
function decodeRequest(bytes: Buffer, limits: RequestLimits): Check {
  const reader = protobuf.Reader.create(bytes);
  let domain: Uint8Array = EMPTY;
  let hitsAddend = 0;
  const descriptors: WireDescriptor[] = [];
  let count = 0;
  let overEntries: string | undefined;
  let inner: Error | undefined;
  while (reader.pos < reader.len) {
    const tag = readTag(reader, REQUEST_WIRE_TYPES);
    if (tag === DOMAIN_TAG) {
      domain = reader.bytes();
    } else if (tag === HITS_ADDEND_TAG) {
      hitsAddend = reader.uint32();
    } else if (tag === DESCRIPTORS_TAG && ++count <= limits.maxDescriptors && !overEntries) {
      const descriptor = readDescriptor(reader, limits.maxEntries);
      if (descriptor.inner) inner ??= descriptor.inner;
      if (descriptor.entryCount > limits.maxEntries) {
        overEntries = `descriptors[${count - 1}] has ${descriptor.entryCount} entries, over MAX_ENTRIES (${limits.maxEntries})`;
      }
      descriptors.push(descriptor);
    } else {
      reader.skipType(tag & 7);
    }
  }
  if (count > limits.maxDescriptors) {
    fail(`${count} descriptors exceed MAX_DESCRIPTORS (${limits.maxDescriptors})`);
  }
  if (overEntries !== undefined) fail(overEntries);
  if (inner) throw inner;
  const checked = text(domain, limits, -1, -1, 'domain');
  if (checked === '') fail('domain is empty');
  if (descriptors.length === 0) fail('no descriptors');
  return {
    domain: checked,
    descriptors: descriptors.map((d, i) => toDescriptor(d, i, limits)),
    hitsAddend,
  };
}

/**
 * One descriptor: its own fields' tags are checked as the request's are; a fault inside an
 * entry, the limit or the cost is kept in `inner`, to be reported after the counts. Entries past
 * `maxEntries` are counted, not read.
 */
function readDescriptor(reader: protobuf.Reader, maxEntries: number): WireDescriptor {
  const length = reader.uint32();
  const end = length + reader.pos;
  // As protobufjs's own reads: a length past the bytes is refused before anything skips to it.
  if (end > reader.len)
    throw new RangeError(`index out of range: ${reader.pos} + ${length} > ${reader.len}`);
  const descriptor: WireDescriptor = {
    entries: [],
    entryCount: 0,
    limit: undefined,
    hitsAddend: undefined,
    isNegativeHits: false,
  };
  while (reader.pos < end) {
    const tag = readTag(reader, DESCRIPTOR_WIRE_TYPES);
    if (tag === IS_NEGATIVE_HITS_TAG) {
      descriptor.isNegativeHits = reader.bool();
      continue;
    }
    if (tag !== ENTRIES_TAG && tag !== LIMIT_TAG && tag !== DESCRIPTOR_HITS_TAG) {
      reader.skipType(tag & 7);
      continue;
    }
    const partEnd = reader.uint32() + reader.pos;
    if (partEnd > end) throw new Error(`a descriptor overruns its length at offset ${end}`);
    if (tag === ENTRIES_TAG && ++descriptor.entryCount > maxEntries) {
      reader.pos = partEnd;
      continue;
    }
    try {
      if (tag === ENTRIES_TAG) descriptor.entries.push(readEntry(reader, partEnd));
      else if (tag === LIMIT_TAG) descriptor.limit = readLimit(reader, partEnd);
      else descriptor.hitsAddend = readUint64Value(reader, partEnd);
    } catch (error) {
      descriptor.inner ??= error instanceof Error ? error : new Error(String(error));
    }
    reader.pos = partEnd;
  }
  if (reader.pos !== end) throw new Error(`a descriptor overruns its length at offset ${end}`);
  return descriptor;
}

function readEntry(reader: protobuf.Reader, end: number): WireDescriptor['entries'][number] {
  let key: Uint8Array = EMPTY;
  let value: Uint8Array = EMPTY;
  while (reader.pos < end) {
    const tag = readTag(reader, ENTRY_WIRE_TYPES);
    if (tag === KEY_TAG) key = reader.bytes();
    else if (tag === VALUE_TAG) value = reader.bytes();
    else reader.skipType(tag & 7);
  }
  overrun(reader, end);
  return { key, value };
}

function readLimit(reader: protobuf.Reader, end: number): WireDescriptor['limit'] {
  const limit = { requestsPerUnit: 0, unit: 0 };
  while (reader.pos < end) {
    const tag = readTag(reader, LIMIT_WIRE_TYPES);
    if (tag === REQUESTS_PER_UNIT_TAG) limit.requestsPerUnit = reader.uint32();
    else if (tag === UNIT_TAG) limit.unit = reader.int32();
    else reader.skipType(tag & 7);
  }
  overrun(reader, end);
  return limit;
}

function readUint64Value(reader: protobuf.Reader, end: number): WireLong {
  let value: WireLong = { low: 0, high: 0 };
  while (reader.pos < end) {
    const tag = readTag(reader, UINT64_VALUE_WIRE_TYPES);
    if (tag === UINT64_VALUE_TAG) value = reader.uint64() as unknown as WireLong;
    else reader.skipType(tag & 7);
  }
  overrun(reader, end);
  return value;
}

function overrun(reader: protobuf.Reader, end: number): void {
  if (reader.pos !== end) throw new Error(`a field overruns its message at offset ${end}`);
}

/** Rejects field 0 and known fields of the wrong wire type, which would be misread. */
function readTag(reader: protobuf.Reader, wireTypes: readonly number[]): number {
  const tag = reader.uint32();
  const expected = wireTypes[tag >>> 3];
  if (tag >>> 3 === 0 || (expected !== undefined && expected !== (tag & 7))) {
    throw new Error(`invalid tag ${tag} at offset ${reader.pos}`);
  }
  return tag;
}

function toDescriptor(wire: WireDescriptor, i: number, limits: RequestLimits): Descriptor {
  const { entries } = wire;
  const path = `descriptors[${i}]`;
  if (entries.length === 0 && limits.emptyDescriptors !== true) fail(`${path} has no entries`);
  const descriptor: Descriptor = {
    entries: entries.map((entry, j) => {
      const key = text(entry.key, limits, i, j, 'key');
      if (key === '') fail(`${path}.entries[${j}].key is empty`);
      return { key, value: text(entry.value, limits, i, j, 'value') };
    }),
  };
  if (wire.limit) {
    if (limits.limitOverrides === false) {
      fail(`${path}.limit: limit overrides are refused (LIMIT_OVERRIDES_ENABLED=false)`);
    }
    const unit = overrideUnits[wire.limit.unit];
    if (unit === undefined) {
      fail(`${path}.limit.unit is ${wire.limit.unit === 0 ? 'UNKNOWN' : wire.limit.unit}`);
    }
    descriptor.limit = { requestsPerUnit: wire.limit.requestsPerUnit, unit };
  }
  if (wire.hitsAddend) descriptor.hitsAddend = toUint64(wire.hitsAddend);
  if (wire.isNegativeHits) descriptor.isNegativeHits = true;
  return descriptor;
}

/** Short ASCII, as keys and values nearly always are, is read here rather than by a C++ call. */
const SHORT_TEXT_BYTES = 64;
type Latin1 = Buffer & { latin1Slice(start: number, end: number): string };

/**
 * A text field, checked against the bounds and then as UTF-8. The field's path (the domain, or
 * entry `j` of descriptor `i`) is spelled out only in an error.
 */
function text(bytes: Uint8Array, limits: RequestLimits, i: number, j: number, field: string) {
  const length = bytes.length;
  if (length === 0) return '';
  const path = () => (i < 0 ? field : `descriptors[${i}].entries[${j}].${field}`);
  if (length > limits.maxEntryBytes) {
    fail(`${path()} is ${length} bytes, over MAX_ENTRY_BYTES (${limits.maxEntryBytes})`);
  }
  const buffer = Buffer.isBuffer(bytes)
    ? bytes
    : Buffer.from(bytes.buffer, bytes.byteOffset, length);
  if (length <= SHORT_TEXT_BYTES) {
    let ascii = true;
    for (let k = 0; k < length && ascii; k++) ascii = (buffer[k] as number) < 0x80;
    // ASCII is valid UTF-8, and its Latin-1 reading is the same text.
    if (ascii) return (buffer as Latin1).latin1Slice(0, length);
  }
  if (!isUtf8(buffer)) fail(`${path()} is not valid UTF-8`);
  return buffer.toString('utf8');
}

/** Exact, from the two unsigned 32-bit halves; a plain number only if protobufjs lacks Long. */
function toUint64(value: number | WireLong): bigint {
  if (typeof value === 'number') return BigInt(value);
  return (BigInt(value.high >>> 0) << 32n) | BigInt(value.low >>> 0);
}

function fail(message: string): never {
  throw new InvalidRequestError(message);
}

const codes = { OK: 1, OVER_LIMIT: 2 } as const;
/** Envoy's RateLimitUnit numbers, which both response encoders write. */
export const reportedUnits: Record<ReportedUnit, number> = {
  unknown: 0,
  second: 1,
  minute: 2,
  hour: 3,
  day: 4,
  month: 5,
  year: 6,
  week: 7,
};
export const UINT32_MAX = 0xffffffff;

/**
 * The RLS response for a decision, by protobufjs: the oracle that responseFrame.ts's hand-written
 * encoder is tested against, and the bench's bare server's constant reply. Throws on a code that
 * is not OK or OVER_LIMIT.
 */
export function encodeResponse(
  decision: Decision,
  headers: readonly ResponseHeader[] | undefined = decision.headers,
): Buffer {
  const bytes = responseType
    .encode({
      overall_code: code(decision.code),
      statuses: decision.statuses.map((status) => ({
        code: code(status.code),
        current_limit: status.currentLimit && {
          requests_per_unit: clampUint32(status.currentLimit.requestsPerUnit),
          unit: reportedUnits[status.currentLimit.unit],
          name: status.currentLimit.name,
        },
        limit_remaining: clampUint32(status.limitRemaining),
        duration_until_reset:
          status.durationUntilResetMs === undefined
            ? undefined
            : duration(status.durationUntilResetMs),
      })),
      response_headers_to_add: headers,
      dynamic_metadata: decision.dynamicMetadata && toStruct(decision.dynamicMetadata),
    })
    .finish();
  return Buffer.isBuffer(bytes) ? bytes : Buffer.from(bytes.buffer, bytes.byteOffset, bytes.length);
}

function code(value: string): number {
  const wire = codes[value as keyof typeof codes] as number | undefined;
  if (wire === undefined) throw new Error(`cannot encode decision code ${value}`);
  return wire;
}

function clampUint32(value: number): number {
  return Math.min(Math.max(Math.trunc(value), 0), UINT32_MAX);
}

function duration(ms: number): { seconds: number; nanos: number } {
  const whole = Math.max(0, Math.ceil(ms));
  return { seconds: Math.floor(whole / 1000), nanos: (whole % 1000) * 1_000_000 };
}

/** Dynamic metadata as the bytes of a google.protobuf.Struct. */
export function encodeStruct(object: Readonly<Record<string, JsonValue>>): Buffer {
  const bytes = structType.encode(toStruct(object)).finish();
  return Buffer.isBuffer(bytes) ? bytes : Buffer.from(bytes.buffer, bytes.byteOffset, bytes.length);
}

/** JSON as google.protobuf.Struct, in the field names of protobufjs's bundled well-known types. */
function toStruct(object: Readonly<Record<string, JsonValue>>): { fields: Record<string, object> } {
  const fields: Record<string, object> = {};
  for (const [key, value] of Object.entries(object)) fields[key] = toValue(value);
  return { fields };
}

function toValue(value: JsonValue): object {
  if (value === null) return { nullValue: 0 };
  if (typeof value === 'number') return { numberValue: value };
  if (typeof value === 'string') return { stringValue: value };
  if (typeof value === 'boolean') return { boolValue: value };
  if (Array.isArray(value)) return { listValue: { values: value.map(toValue) } };
  return { structValue: toStruct(value) };
}
