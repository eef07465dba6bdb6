/**
 * The hot path's wire codec: the RLS request straight into a validated `Check`, and a `Decision`
 * straight into response bytes, skipping proto-loader's generic object conversion.
 */
import { isUtf8 } from 'node:buffer';
import protobuf from 'protobufjs';
import type { Check, Decision, Descriptor, OverrideUnit, ReportedUnit } from '../check.js';
import type { JsonValue } from '../rules/types.js';
import { InvalidRequestError } from '../errors.js';
import { loadProtoRoot } from './protos.js';

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

const requestType = loadProtoRoot('bytes').lookupType(
  'envoy.service.ratelimit.v3.RateLimitRequest',
);
const responseType = loadProtoRoot('strings').lookupType(
  'envoy.service.ratelimit.v3.RateLimitResponse',
);
const structType = loadProtoRoot('strings').lookupType('google.protobuf.Struct');

// What protobufjs decodes from the bytes root: absent messages are null, defaults come from prototypes.
interface WireLong {
  low: number;
  high: number;
}
interface WireDescriptor {
  entries: { key: Uint8Array; value: Uint8Array }[];
  limit: { requests_per_unit: number; unit: number } | null;
  hits_addend: { value: number | WireLong } | null;
}
interface WireRequest {
  domain: Uint8Array;
  descriptors: WireDescriptor[];
  hits_addend: number;
}

const overrideUnits: readonly (OverrideUnit | undefined)[] = [
  undefined,
  ...(['second', 'minute', 'hour', 'day', 'month', 'year'] as const),
];
// Length-delimited tags of RateLimitRequest.descriptors (2) and RateLimitDescriptor.entries (1).
const DESCRIPTORS_TAG = (2 << 3) | 2;
const ENTRIES_TAG = (1 << 3) | 2;
// Wire type by field number: 0 varint, 2 length-delimited.
const REQUEST_WIRE_TYPES = [-1, 2, 2, 0];
const DESCRIPTOR_WIRE_TYPES = [-1, 2, 2, 2];

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

function decodeRequest(bytes: Buffer, limits: RequestLimits): Check {
  checkCounts(bytes, limits);
  const wire = requestType.decode(bytes) as unknown as WireRequest;
  const domain = text(wire.domain, 'domain', limits);
  if (domain === '') fail('domain is empty');
  if (wire.descriptors.length === 0) fail('no descriptors');
  return {
    domain,
    descriptors: wire.descriptors.map((d, i) => toDescriptor(d, `descriptors[${i}]`, limits)),
    hitsAddend: wire.hits_addend,
  };
}

/**
 * Enforces the count bounds by skipping over the raw fields before anything is decoded, so an
 * oversized request costs no allocation. Entries are counted only in descriptors within bounds.
 */
function checkCounts(bytes: Buffer, limits: RequestLimits): void {
  const reader = protobuf.Reader.create(bytes);
  let count = 0;
  let overEntries: string | undefined;
  while (reader.pos < reader.len) {
    const tag = readTag(reader, REQUEST_WIRE_TYPES);
    if (tag === DESCRIPTORS_TAG) count++;
    if (tag !== DESCRIPTORS_TAG || count > limits.maxDescriptors || overEntries !== undefined) {
      reader.skipType(tag & 7);
      continue;
    }
    const entries = countEntries(reader);
    if (entries > limits.maxEntries) {
      overEntries = `descriptors[${count - 1}] has ${entries} entries, over MAX_ENTRIES (${limits.maxEntries})`;
    }
  }
  if (count > limits.maxDescriptors) {
    fail(`${count} descriptors exceed MAX_DESCRIPTORS (${limits.maxDescriptors})`);
  }
  if (overEntries !== undefined) fail(overEntries);
}

function countEntries(reader: protobuf.Reader): number {
  const end = reader.uint32() + reader.pos;
  let entries = 0;
  while (reader.pos < end) {
    const tag = readTag(reader, DESCRIPTOR_WIRE_TYPES);
    if (tag === ENTRIES_TAG) entries++;
    reader.skipType(tag & 7);
  }
  if (reader.pos !== end) throw new Error(`a descriptor overruns its length at offset ${end}`);
  return entries;
}

/** Rejects field 0 and known fields of the wrong wire type, which protobufjs would misread. */
function readTag(reader: protobuf.Reader, wireTypes: readonly number[]): number {
  const tag = reader.uint32();
  const expected = wireTypes[tag >>> 3];
  if (tag >>> 3 === 0 || (expected !== undefined && expected !== (tag & 7))) {
    throw new Error(`invalid tag ${tag} at offset ${reader.pos}`);
  }
  return tag;
}

function toDescriptor(wire: WireDescriptor, path: string, limits: RequestLimits): Descriptor {
  const { entries } = wire;
  if (entries.length === 0 && limits.emptyDescriptors !== true) fail(`${path} has no entries`);
  const descriptor: Descriptor = {
    entries: entries.map((entry, j) => {
      const key = text(entry.key, `${path}.entries[${j}].key`, limits);
      if (key === '') fail(`${path}.entries[${j}].key is empty`);
      return { key, value: text(entry.value, `${path}.entries[${j}].value`, limits) };
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
    descriptor.limit = { requestsPerUnit: wire.limit.requests_per_unit, unit };
  }
  if (wire.hits_addend) descriptor.hitsAddend = toUint64(wire.hits_addend.value);
  return descriptor;
}

function text(bytes: Uint8Array, path: string, limits: RequestLimits): string {
  // An absent bytes field decodes to protobufjs' shared empty array, not a Buffer.
  if (bytes.length === 0) return '';
  if (bytes.length > limits.maxEntryBytes) {
    fail(`${path} is ${bytes.length} bytes, over MAX_ENTRY_BYTES (${limits.maxEntryBytes})`);
  }
  if (!isUtf8(bytes)) fail(`${path} is not valid UTF-8`);
  return Buffer.from(bytes.buffer, bytes.byteOffset, bytes.length).toString('utf8');
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
const reportedUnits: Record<ReportedUnit, number> = {
  unknown: 0,
  second: 1,
  minute: 2,
  hour: 3,
  day: 4,
  month: 5,
  year: 6,
  week: 7,
};
const UINT32_MAX = 0xffffffff;

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
