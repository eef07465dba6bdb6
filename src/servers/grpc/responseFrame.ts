/**
 * The RLS response, written by hand straight into one gRPC frame: the 5-byte prefix (not
 * compressed, then the length), then the RateLimitResponse. Sizes are counted first, so the frame
 * is one allocation and nothing is copied after it.
 *
 * The bytes are the ones protobufjs writes for the same response (test/unit/responseFrame.test.ts
 * checks this on random decisions): fields in field-number order, and a proto3 field written
 * whenever the decision has a value for it, zeros included. Dynamic metadata, rare and nested,
 * is the one part protobufjs still encodes.
 */
import type { Decision, DescriptorStatus } from '../../core/check.js';
import type { ResponseHeader } from './codec.js';
import { encodeStruct, reportedUnits, UINT32_MAX } from './codec.js';

const codes: Readonly<Record<string, number>> = { OK: 1, OVER_LIMIT: 2 };
const PREFIX_BYTES = 5;

// Tags: field number << 3 | wire type (0 varint, 2 length-delimited).
const TAG_OVERALL_CODE = 0x08;
const TAG_STATUS = 0x12;
const TAG_RESPONSE_HEADER = 0x1a;
const TAG_DYNAMIC_METADATA = 0x32;
const TAG_CODE = 0x08;
const TAG_CURRENT_LIMIT = 0x12;
const TAG_LIMIT_REMAINING = 0x18;
const TAG_DURATION = 0x22;
const TAG_REQUESTS_PER_UNIT = 0x08;
const TAG_UNIT = 0x10;
const TAG_NAME = 0x1a;
const TAG_SECONDS = 0x08;
const TAG_NANOS = 0x10;
const TAG_HEADER_KEY = 0x0a;
const TAG_HEADER_VALUE = 0x12;

/** Replies that never change, by descriptor count: every descriptor OK with no limit. */
const plainReplies = new Map<number, Buffer>();
const MAX_PLAIN_REPLIES = 64;

/**
 * The framed response for a decision. Throws on a code that is not OK or OVER_LIMIT, before
 * anything is allocated.
 */
export function encodeResponseFrame(
  decision: Decision,
  headers: readonly ResponseHeader[] | undefined = decision.headers,
): Buffer {
  const plain = isPlain(decision, headers);
  if (plain) {
    const cached = plainReplies.get(decision.statuses.length);
    if (cached) return cached;
  }
  const overall = code(decision.code);
  const metadata = decision.dynamicMetadata && encodeStruct(decision.dynamicMetadata);
  let size = 2; // the overall code
  for (const status of decision.statuses) size += nested(statusSize(status));
  if (headers) for (const header of headers) size += nested(headerSize(header));
  if (metadata) size += nested(metadata.length);

  const frame = Buffer.allocUnsafe(PREFIX_BYTES + size);
  frame[0] = 0;
  frame.writeUInt32BE(size, 1);
  let at = PREFIX_BYTES;
  frame[at++] = TAG_OVERALL_CODE;
  frame[at++] = overall;
  for (const status of decision.statuses) at = writeStatus(frame, at, status);
  if (headers) {
    for (const header of headers) {
      frame[at++] = TAG_RESPONSE_HEADER;
      at = varint(frame, at, headerSize(header));
      at = writeString(frame, at, TAG_HEADER_KEY, header.key);
      at = writeString(frame, at, TAG_HEADER_VALUE, header.value);
    }
  }
  if (metadata) {
    frame[at++] = TAG_DYNAMIC_METADATA;
    at = varint(frame, at, metadata.length);
    at += metadata.copy(frame, at);
  }
  if (plain && plainReplies.size < MAX_PLAIN_REPLIES) {
    plainReplies.set(decision.statuses.length, frame);
  }
  return frame;
}

function isPlain(decision: Decision, headers: readonly ResponseHeader[] | undefined): boolean {
  if (decision.code !== 'OK' || decision.dynamicMetadata || (headers && headers.length > 0)) {
    return false;
  }
  for (const status of decision.statuses) {
    if (
      status.code !== 'OK' ||
      status.currentLimit ||
      status.durationUntilResetMs !== undefined ||
      status.limitRemaining !== 0
    ) {
      return false;
    }
  }
  return true;
}

function statusSize(status: DescriptorStatus): number {
  let size = 2 + 1 + varintSize(clampUint32(status.limitRemaining)); // code, limit_remaining
  code(status.code);
  const limit = status.currentLimit;
  if (limit) size += nested(limitSize(limit));
  if (status.durationUntilResetMs !== undefined) {
    size += nested(durationSize(status.durationUntilResetMs));
  }
  return size;
}

function limitSize(limit: NonNullable<DescriptorStatus['currentLimit']>): number {
  return 1 + varintSize(clampUint32(limit.requestsPerUnit)) + 2 + stringSize(limit.name);
}

function durationSize(ms: number): number {
  const whole = wholeMs(ms);
  return 1 + varintSize(Math.floor(whole / 1000)) + 1 + varintSize((whole % 1000) * 1_000_000);
}

function headerSize(header: ResponseHeader): number {
  return stringSize(header.key) + stringSize(header.value);
}

function writeStatus(frame: Buffer, start: number, status: DescriptorStatus): number {
  let at = start;
  frame[at++] = TAG_STATUS;
  at = varint(frame, at, statusSize(status));
  frame[at++] = TAG_CODE;
  frame[at++] = code(status.code);
  const limit = status.currentLimit;
  if (limit) {
    frame[at++] = TAG_CURRENT_LIMIT;
    at = varint(frame, at, limitSize(limit));
    frame[at++] = TAG_REQUESTS_PER_UNIT;
    at = varint(frame, at, clampUint32(limit.requestsPerUnit));
    frame[at++] = TAG_UNIT;
    frame[at++] = reportedUnits[limit.unit];
    at = writeString(frame, at, TAG_NAME, limit.name);
  }
  frame[at++] = TAG_LIMIT_REMAINING;
  at = varint(frame, at, clampUint32(status.limitRemaining));
  if (status.durationUntilResetMs !== undefined) {
    const whole = wholeMs(status.durationUntilResetMs);
    frame[at++] = TAG_DURATION;
    at = varint(frame, at, durationSize(status.durationUntilResetMs));
    frame[at++] = TAG_SECONDS;
    at = varint(frame, at, Math.floor(whole / 1000));
    frame[at++] = TAG_NANOS;
    at = varint(frame, at, (whole % 1000) * 1_000_000);
  }
  return at;
}

function writeString(frame: Buffer, start: number, tag: number, value: string): number {
  let at = start;
  frame[at++] = tag;
  const bytes = utf8Length(value);
  at = varint(frame, at, bytes);
  if (bytes !== value.length) return at + frame.write(value, at, bytes, 'utf8');
  // ASCII, as names and header values nearly always are: byte by byte beats a call into C++.
  for (let i = 0; i < bytes; i++) frame[at + i] = value.charCodeAt(i);
  return at + bytes;
}

/** Short ASCII text is counted here; anything else by Buffer.byteLength. */
function utf8Length(value: string): number {
  if (value.length > 256) return Buffer.byteLength(value, 'utf8');
  for (let i = 0; i < value.length; i++) {
    if (value.charCodeAt(i) >= 0x80) return Buffer.byteLength(value, 'utf8');
  }
  return value.length;
}

/** A length-delimited field of `size` bytes, with its one-byte tag and its length. */
function nested(size: number): number {
  return 1 + varintSize(size) + size;
}

function stringSize(value: string): number {
  return nested(utf8Length(value));
}

/** Varints of non-negative integers below 2^53, as protobufjs writes uint32 and int64 alike. */
function varintSize(value: number): number {
  if (value < 0x80) return 1;
  if (value < 0x4000) return 2;
  if (value < 0x200000) return 3;
  if (value < 0x10000000) return 4;
  let size = 5;
  for (let rest = Math.floor(value / 2 ** 35); rest > 0; rest = Math.floor(rest / 128)) size++;
  return size;
}

function varint(frame: Buffer, start: number, value: number): number {
  let at = start;
  if (value < 0x80) {
    frame[at] = value;
    return at + 1;
  }
  let rest = value;
  while (rest >= 0x80) {
    frame[at++] = (rest % 128) | 0x80;
    rest = Math.floor(rest / 128);
  }
  frame[at++] = rest;
  return at;
}

function code(value: string): number {
  const wire = codes[value];
  if (wire === undefined) throw new Error(`cannot encode decision code ${value}`);
  return wire;
}

/** As protobufjs writes a uint32 from a number: whole, 0 for NaN and below, clamped above. */
function clampUint32(value: number): number {
  return value > 0 ? Math.min(Math.trunc(value), UINT32_MAX) : 0;
}

/** A duration is whole milliseconds, rounded up: seconds and nanos follow from it. */
function wholeMs(ms: number): number {
  // protobufjs writes NaN and Infinity as 0; past 2^53 a number has no whole milliseconds left.
  return Number.isFinite(ms) && ms > 0 ? Math.min(Math.ceil(ms), 2 ** 53) : 0;
}
