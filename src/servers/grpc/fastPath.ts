/**
 * ShouldRateLimit served on node:http2's own streams, beside grpc-js on the same server and port
 * (see http2Dispatch.ts). Envoy waits for this one call on every request it passes, and grpc-js's
 * per-call machinery (interceptors, Metadata objects, a call object and its listeners, a
 * serializer round) costs more than the decision itself. Here a call is one small record on its
 * stream (fastPathCall.ts), listeners that are module-level functions, static response headers
 * and trailers, and a reply encoded straight into its frame (responseFrame.ts).
 *
 * The contract is grpc-js's, case by case (test/e2e/fastPathConformance.test.ts sends every case
 * to both): the content-type check, `grpc-timeout` read as grpc-js reads it, identity, gzip and
 * deflate messages and the same errors for the others, the receive limit, one message per call,
 * Trailers-Only errors, and the same status codes and messages. GRPC_CLIENT_TLS_SAN is checked
 * here as grpc-js's interceptor checks it, and the guard's bounds (the idle-connection one
 * included) count these calls with grpc-js's. grpc-js's own idle-connection timer
 * (`grpc.max_connection_idle_ms`) would not see them, so tollgate does not set it.
 */
import http2 from 'node:http2';
import { TLSSocket } from 'node:tls';
import zlib from 'node:zlib';
import { status as Status } from '@grpc/grpc-js';
import { matchesClientSan } from './credentials.js';
import {
  answer,
  CALL,
  DECIDING,
  fail,
  failWith,
  finish,
  metadataValue,
  readStreamHeader,
  READING,
  type Call,
  type CallStream,
  type FastPathOptions,
} from './fastPathCall.js';
import { encodeResponseFrame } from './responseFrame.js';

export type { FastPathOptions } from './fastPathCall.js';

export const SHOULD_RATE_LIMIT_PATH =
  '/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit';

/** As grpc-js reads `grpc-timeout`, its first match anywhere in the value. */
const TIMEOUT = /(\d{1,8})\s*([HMSmun])/;
const TIMEOUT_UNIT_MS: Readonly<Record<string, number>> = {
  H: 3_600_000,
  M: 60_000,
  S: 1_000,
  m: 1,
  u: 0.001,
  n: 0.000001,
};
/** Node runs a longer timer at once; grpc-js wraps such a timeout round, here it never fires. */
const MAX_TIMER_MS = 2 ** 31 - 1;
const UNSUPPORTED_MEDIA_TYPE = { [http2.constants.HTTP2_HEADER_STATUS]: 415 };
const END_STREAM = { endStream: true };

export function createFastPath(
  options: FastPathOptions,
): (stream: http2.ServerHttp2Stream, headers: http2.IncomingHttpHeaders) => void {
  return (stream, headers) => open(options, stream, headers);
}

function open(
  options: FastPathOptions,
  stream: http2.ServerHttp2Stream,
  headers: http2.IncomingHttpHeaders,
): void {
  stream.on('error', ignore);
  const contentType = headers[http2.constants.HTTP2_HEADER_CONTENT_TYPE];
  if (typeof contentType !== 'string' || !contentType.startsWith('application/grpc')) {
    stream.respond(UNSUPPORTED_MEDIA_TYPE, END_STREAM);
    return;
  }
  const { guard } = options;
  const guarded = guard?.admit(stream);
  if (guard && guarded === undefined) return;
  const call: Call = {
    options,
    stream,
    headers,
    phase: READING,
    guarded,
    deadline: undefined,
    encoding: metadataValue(headers['grpc-encoding']) ?? 'identity',
    parts: undefined,
    partBytes: 0,
    partNeeds: 0,
    message: undefined,
    backlog: undefined,
  };
  (stream as CallStream)[CALL] = call;
  // Each fires once: `on` spares the wrapper that `once` allocates.
  stream.on('data', onData);
  stream.on('end', onEnd);
  stream.on('close', onClose);

  // The certificate first: grpc-js's interceptor refuses the call before its timeout is read.
  const { clientSan } = options;
  if (clientSan !== undefined && !fromClient(stream, clientSan)) {
    const details = `the client certificate is not for ${clientSan} (GRPC_CLIENT_TLS_SAN)`;
    return fail(call, Status.PERMISSION_DENIED, details);
  }
  const timeout = metadataValue(headers['grpc-timeout']);
  if (timeout === undefined) return;
  const match = TIMEOUT.exec(timeout);
  if (match === null) return fail(call, Status.INTERNAL, `Invalid grpc-timeout value "${timeout}"`);
  const ms = Math.trunc(Number(match[1]) * (TIMEOUT_UNIT_MS[match[2] ?? ''] ?? 0));
  if (ms <= MAX_TIMER_MS) call.deadline = setTimeout(onDeadline, ms, call);
}

function onData(this: CallStream, chunk: Buffer): void {
  const call = this[CALL];
  if (call === undefined || call.phase !== READING) return;
  const { guard, maxReceiveMessageBytes: maxBytes } = call.options;
  if (call.guarded && !guard?.receive(this, call.guarded, chunk.length)) return;
  let parts = call.parts;
  if (parts === undefined) return receiveBytes(call, chunk);
  parts.push(chunk);
  call.partBytes += chunk.length;
  if (call.partNeeds === 0) {
    // The prefix completes: its length is checked now, as grpc-js checks it.
    if (call.partBytes < 5) return;
    const head = Buffer.concat(parts, call.partBytes);
    parts = call.parts = [head];
    const length = head.readUInt32BE(1);
    if (maxBytes !== -1 && length > maxBytes) return receiveBytes(call, head);
    call.partNeeds = 5 + length;
  }
  if (call.partBytes < call.partNeeds) return;
  const data = parts.length === 1 ? (parts[0] as Buffer) : Buffer.concat(parts, call.partBytes);
  call.parts = undefined;
  call.partNeeds = 0;
  receiveBytes(call, data);
}

function onEnd(this: CallStream): void {
  const call = this[CALL];
  if (call === undefined) return;
  if (call.guarded) call.options.guard?.arrived(call.guarded);
  if (call.phase !== READING) return;
  if (call.backlog !== undefined) call.backlog.push(null);
  else halfClose(call);
}

function onClose(this: CallStream): void {
  const call = this[CALL];
  if (call === undefined) return;
  if (call.guarded) call.options.guard?.release(this, call.guarded);
  finish(call);
  this[CALL] = undefined;
}

function onDeadline(call: Call): void {
  call.deadline = undefined;
  fail(call, Status.DEADLINE_EXCEEDED, 'Deadline exceeded');
}

/** As grpc-js's decoder: a length over the limit anywhere in the bytes fails the whole write. */
function receiveBytes(call: Call, data: Buffer): void {
  const maxBytes = call.options.maxReceiveMessageBytes;
  let end = 0;
  let frames = 0;
  while (data.length - end >= 5) {
    const length = data.readUInt32BE(end + 1);
    if (maxBytes !== -1 && length > maxBytes) {
      const details = `Received message larger than max (${length} vs ${maxBytes})`;
      return fail(call, Status.RESOURCE_EXHAUSTED, details);
    }
    if (data.length - end - 5 < length) break;
    end += 5 + length;
    frames++;
  }
  if (end < data.length) {
    const rest = end === 0 ? data : data.subarray(end);
    call.parts = [rest];
    call.partBytes = rest.length;
    call.partNeeds = rest.length >= 5 ? 5 + rest.readUInt32BE(1) : 0;
  }
  if (frames === 1 && end === data.length && call.backlog === undefined) {
    return receiveMessage(call, data);
  }
  for (let at = 0; at < end && call.phase === READING;) {
    const frame = data.subarray(at, at + 5 + data.readUInt32BE(at + 1));
    at += frame.length;
    if (call.backlog !== undefined) call.backlog.push(frame);
    else receiveMessage(call, frame);
  }
}

/** One whole message, prefix included: identity at once, gzip and deflate off the thread. */
function receiveMessage(call: Call, frame: Buffer): void {
  const payload = frame.subarray(5);
  const encoding = frame[0] === 1 ? call.encoding : 'identity';
  if (encoding === 'identity') return accept(call, payload);
  if (encoding !== 'gzip' && encoding !== 'deflate') {
    const details = `Received message compressed with unsupported encoding "${encoding}"`;
    return fail(call, Status.UNIMPLEMENTED, details);
  }
  call.backlog = [];
  const maxBytes = call.options.maxReceiveMessageBytes;
  const inflate = encoding === 'gzip' ? zlib.gunzip : zlib.inflate;
  const limit = maxBytes === -1 ? {} : { maxOutputLength: Math.max(1, maxBytes) };
  inflate(payload, limit, (error, message) => {
    if (call.phase !== READING) return;
    if (error) {
      if ((error as NodeJS.ErrnoException).code !== 'ERR_BUFFER_TOO_LARGE') {
        return fail(call, Status.INTERNAL, 'Failed to decompress message');
      }
      const details = `Received message that decompresses to a size larger than ${maxBytes}`;
      return fail(call, Status.RESOURCE_EXHAUSTED, details);
    }
    const backlog = call.backlog ?? [];
    call.backlog = undefined;
    accept(call, message);
    for (const next of backlog) {
      if (call.phase !== READING) return;
      // A message after it may itself be decompressing by now: the rest waits behind it.
      const waiting = call.backlog as (Buffer | null)[] | undefined;
      if (waiting !== undefined) waiting.push(next);
      else if (next === null) halfClose(call);
      else receiveMessage(call, next);
    }
  });
}

function accept(call: Call, message: Buffer): void {
  if (call.message !== undefined) {
    const details = `Received a second request message for server streaming method ${SHOULD_RATE_LIMIT_PATH}`;
    return fail(call, Status.UNIMPLEMENTED, details);
  }
  call.message = message;
}

/** The request's end: its one message is decided, or the call fails as grpc-js fails it. */
function halfClose(call: Call): void {
  const { message } = call;
  if (message === undefined) {
    const details = `Received no request message for server streaming method ${SHOULD_RATE_LIMIT_PATH}`;
    return fail(call, Status.UNIMPLEMENTED, details);
  }
  call.phase = DECIDING;
  call.message = undefined;
  void serve(call, message);
}

async function serve(call: Call, message: Buffer): Promise<void> {
  const { options } = call;
  const request = options.decodeRequest(message);
  if (!request.ok) {
    options.onInvalidRequest?.();
    return failWith(call, request.error);
  }
  let frame: Buffer;
  try {
    const decided = await options.decide(request.check, call.headers, readStreamHeader);
    if (call.phase !== DECIDING) return;
    frame = encodeResponseFrame(decided, decided.headers);
  } catch (error) {
    return failWith(call, error);
  }
  answer(call, frame);
}

function ignore(): void {
  // Every error on a stream also closes it, and 'close' ends the call.
}

/** As grpc-js's auth context: a verified TLS client whose certificate is for `san`. */
function fromClient(stream: http2.ServerHttp2Stream, san: string): boolean {
  const socket = stream.session?.socket;
  if (!(socket instanceof TLSSocket) || !socket.authorized) return false;
  const certificate = socket.getPeerCertificate();
  return matchesClientSan(certificate.raw ? certificate : undefined, san);
}
