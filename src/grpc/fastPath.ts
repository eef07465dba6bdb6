/**
 * ShouldRateLimit served on node:http2's own streams, beside grpc-js on the same server and port
 * (see http2Dispatch.ts). Envoy waits for this one call on every request it passes, and grpc-js's
 * per-call machinery (interceptors, Metadata objects, a call object and its listeners, a
 * serializer round) costs more than the decision itself. Here a call is one small record on its
 * stream, listeners that are module-level functions, static response headers and trailers, and a
 * reply encoded straight into its frame.
 *
 * The contract is grpc-js's, case by case (test/e2e/fastPathConformance.test.ts sends every case
 * to both): the content-type check, `grpc-timeout` read as grpc-js reads it, identity, gzip and
 * deflate messages and the same errors for the others, the receive limit, one message per call,
 * Trailers-Only errors, and the same status codes and messages. GRPC_CLIENT_TLS_SAN is checked
 * here as grpc-js's interceptor checks it, and the guard's bounds count these calls with grpc-js's.
 */
import http2 from 'node:http2';
import { TLSSocket } from 'node:tls';
import zlib from 'node:zlib';
import { status as Status } from '@grpc/grpc-js';
import type { Check, HeaderReader } from '../check.js';
import type { DecodedRequest, ResponseHeader } from './codec.js';
import { matchesClientSan } from './credentials.js';
import type { Guard, GuardedCall } from './guard.js';
import { encodeResponseFrame } from './responseFrame.js';
import { toGrpcStatus } from './status.js';
import type { Decision } from '../check.js';

export const SHOULD_RATE_LIMIT_PATH =
  '/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit';

export interface FastPathOptions {
  decide<C>(
    check: Check,
    headers: C,
    readHeader: HeaderReader<C>,
  ): Promise<Decision & { headers?: readonly ResponseHeader[] }>;
  decodeRequest(bytes: Buffer): DecodedRequest;
  /** grpc-js's `grpc.max_receive_message_length`: -1 for no limit. */
  maxReceiveMessageBytes: number;
  /** GRPC_CLIENT_TLS_SAN: calls from a client certificate for another name are refused. */
  clientSan?: string;
  guard?: Guard;
  onInternalError?(error: unknown): void;
  onInvalidRequest?(): void;
}

const READING = 0;
const DECIDING = 1;
const DONE = 2;

interface Call {
  stream: http2.ServerHttp2Stream;
  headers: http2.IncomingHttpHeaders;
  phase: typeof READING | typeof DECIDING | typeof DONE;
  guarded: GuardedCall | undefined;
  deadline: NodeJS.Timeout | undefined;
  /** The request's `grpc-encoding`, which a message flagged compressed is in. */
  encoding: string;
  /** Bytes of a message that has not fully arrived, prefix included. */
  parts: Buffer[] | undefined;
  partBytes: number;
  /** The whole size of that message, once its prefix is in; 0 before. */
  partNeeds: number;
  /** The request, once its one message is in. */
  message: Buffer | undefined;
  /** While a message is being decompressed, what arrived after it, in order; null: its end. */
  backlog: (Buffer | null)[] | undefined;
}

const CALL = Symbol('tollgate.call');
type CallStream = http2.ServerHttp2Stream & { [CALL]?: Call };

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

const OK_HEADERS = {
  [http2.constants.HTTP2_HEADER_STATUS]: 200,
  [http2.constants.HTTP2_HEADER_CONTENT_TYPE]: 'application/grpc+proto',
  'grpc-accept-encoding': 'identity,deflate,gzip',
  'grpc-encoding': 'identity',
};
const OK_OPTIONS = { waitForTrailers: true };
const OK_TRAILERS = { 'grpc-status': Status.OK, 'grpc-message': 'OK' };
const UNSUPPORTED_MEDIA_TYPE = { [http2.constants.HTTP2_HEADER_STATUS]: 415 };
const END_STREAM = { endStream: true };

/** The request headers grpc-js keeps out of a call's metadata. */
const NOT_METADATA = new Set([
  'grpc-timeout',
  'grpc-encoding',
  'grpc-accept-encoding',
  'accept-encoding',
  'te',
  'content-type',
]);
const METADATA_VALUE = /^[ -~]*$/;

/**
 * A request header as grpc-js's Metadata gives it: text values only (a `-bin` key's values are
 * not text), printable ASCII, never a pseudo-header or one of grpc's own.
 */
const readStreamHeader: HeaderReader<http2.IncomingHttpHeaders> = (headers, name) => {
  if (name.startsWith(':') || name.endsWith('-bin') || NOT_METADATA.has(name)) return undefined;
  const value = headers[name];
  if (value === undefined) return undefined;
  const values = (Array.isArray(value) ? value : [value]).filter((v) => METADATA_VALUE.test(v));
  return values.length === 0 ? undefined : values;
};

export function createFastPath(
  options: FastPathOptions,
): (stream: http2.ServerHttp2Stream, headers: http2.IncomingHttpHeaders) => void {
  const { guard, maxReceiveMessageBytes: maxBytes } = options;

  const finish = (call: Call) => {
    call.phase = DONE;
    if (call.deadline !== undefined) clearTimeout(call.deadline);
    call.deadline = undefined;
    call.parts = undefined;
    call.backlog = undefined;
  };

  /** Ends the call with a Trailers-Only response, as grpc-js sends every error. */
  const fail = (call: Call, code: Status, details: string) => {
    if (call.phase === DONE) return;
    finish(call);
    const { stream } = call;
    if (stream.destroyed || stream.closed || stream.headersSent) return;
    const trailers = {
      'grpc-status': code,
      'grpc-message': encodeURI(details),
      [http2.constants.HTTP2_HEADER_STATUS]: 200,
      [http2.constants.HTTP2_HEADER_CONTENT_TYPE]: 'application/grpc+proto',
    };
    respond(stream, trailers, END_STREAM);
  };

  /** Node throws when the session went away under the stream: the call is over, nothing more. */
  const respond = (
    stream: http2.ServerHttp2Stream,
    headers: http2.OutgoingHttpHeaders,
    respondOptions: http2.ServerStreamResponseOptions,
    frame?: Buffer,
  ) => {
    try {
      stream.respond(headers, respondOptions);
      if (frame === undefined) return;
      stream.on('wantTrailers', sendOkTrailers);
      stream.end(frame);
    } catch (error) {
      options.onInternalError?.(error);
      stream.destroy();
    }
  };

  const failWith = (call: Call, error: unknown) => {
    const status = toGrpcStatus(error);
    if (status.code === Status.INTERNAL) options.onInternalError?.(error);
    fail(call, status.code, status.details);
  };

  const answer = (call: Call, frame: Buffer) => {
    if (call.phase !== DECIDING) return;
    finish(call);
    const { stream } = call;
    if (stream.destroyed || stream.closed) return;
    respond(stream, OK_HEADERS, OK_OPTIONS, frame);
  };

  const serve = async (call: Call, message: Buffer) => {
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
  };

  /** The request's end: its one message is decided, or the call fails as grpc-js fails it. */
  const halfClose = (call: Call) => {
    const { message } = call;
    if (message === undefined) {
      return fail(
        call,
        Status.UNIMPLEMENTED,
        `Received no request message for server streaming method ${SHOULD_RATE_LIMIT_PATH}`,
      );
    }
    call.phase = DECIDING;
    call.message = undefined;
    void serve(call, message);
  };

  const accept = (call: Call, message: Buffer) => {
    if (call.message !== undefined) {
      return fail(
        call,
        Status.UNIMPLEMENTED,
        `Received a second request message for server streaming method ${SHOULD_RATE_LIMIT_PATH}`,
      );
    }
    call.message = message;
  };

  /** One whole message, prefix included: identity at once, gzip and deflate off the thread. */
  const receiveMessage = (call: Call, frame: Buffer) => {
    const payload = frame.subarray(5);
    const encoding = frame[0] === 1 ? call.encoding : 'identity';
    if (encoding === 'identity') return accept(call, payload);
    if (encoding !== 'gzip' && encoding !== 'deflate') {
      return fail(
        call,
        Status.UNIMPLEMENTED,
        `Received message compressed with unsupported encoding "${encoding}"`,
      );
    }
    call.backlog = [];
    const inflate = encoding === 'gzip' ? zlib.gunzip : zlib.inflate;
    const limit = maxBytes === -1 ? {} : { maxOutputLength: Math.max(1, maxBytes) };
    inflate(payload, limit, (error, message) => {
      if (call.phase !== READING) return;
      if (error) {
        const tooLarge = (error as NodeJS.ErrnoException).code === 'ERR_BUFFER_TOO_LARGE';
        return tooLarge
          ? fail(
              call,
              Status.RESOURCE_EXHAUSTED,
              `Received message that decompresses to a size larger than ${maxBytes}`,
            )
          : fail(call, Status.INTERNAL, 'Failed to decompress message');
      }
      const backlog = call.backlog ?? [];
      call.backlog = undefined;
      accept(call, message);
      for (const next of backlog) {
        if (call.phase !== READING) return;
        // A message after it may itself be decompressing by now: the rest waits behind it.
        const waiting = call.backlog as (Buffer | null)[] | undefined;
        if (waiting !== undefined) {
          waiting.push(next);
        } else if (next === null) {
          halfClose(call);
        } else {
          receiveMessage(call, next);
        }
      }
    });
  };

  /** As grpc-js's decoder: a length over the limit anywhere in the bytes fails the whole write. */
  const receiveBytes = (call: Call, data: Buffer) => {
    let end = 0;
    let frames = 0;
    while (data.length - end >= 5) {
      const length = data.readUInt32BE(end + 1);
      if (maxBytes !== -1 && length > maxBytes) {
        return fail(
          call,
          Status.RESOURCE_EXHAUSTED,
          `Received message larger than max (${length} vs ${maxBytes})`,
        );
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
  };

  function onData(this: CallStream, chunk: Buffer): void {
    const call = this[CALL];
    if (call === undefined || call.phase !== READING) return;
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
    if (call.guarded) guard?.arrived(call.guarded);
    if (call.phase !== READING) return;
    if (call.backlog !== undefined) call.backlog.push(null);
    else halfClose(call);
  }

  function onClose(this: CallStream): void {
    const call = this[CALL];
    if (call === undefined) return;
    if (call.guarded) guard?.release(this, call.guarded);
    finish(call);
    this[CALL] = undefined;
  }

  function onDeadline(call: Call): void {
    call.deadline = undefined;
    fail(call, Status.DEADLINE_EXCEEDED, 'Deadline exceeded');
  }

  return (stream, headers) => {
    stream.on('error', ignore);
    const contentType = headers[http2.constants.HTTP2_HEADER_CONTENT_TYPE];
    if (typeof contentType !== 'string' || !contentType.startsWith('application/grpc')) {
      stream.respond(UNSUPPORTED_MEDIA_TYPE, END_STREAM);
      return;
    }
    const guarded = guard?.admit(stream);
    if (guard && guarded === undefined) return;
    const encoding = metadataValue(headers['grpc-encoding']);
    const call: Call = {
      stream,
      headers,
      phase: READING,
      guarded,
      deadline: undefined,
      encoding: encoding ?? 'identity',
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
      return fail(
        call,
        Status.PERMISSION_DENIED,
        `the client certificate is not for ${clientSan} (GRPC_CLIENT_TLS_SAN)`,
      );
    }
    const timeout = metadataValue(headers['grpc-timeout']);
    if (timeout === undefined) return;
    const match = TIMEOUT.exec(timeout);
    if (match === null)
      return fail(call, Status.INTERNAL, `Invalid grpc-timeout value "${timeout}"`);
    const ms = Math.trunc(Number(match[1]) * (TIMEOUT_UNIT_MS[match[2] ?? ''] ?? 0));
    if (ms <= MAX_TIMER_MS) call.deadline = setTimeout(onDeadline, ms, call);
  };
}

/** A header's first value as grpc-js's Metadata keeps it: printable ASCII only. */
function metadataValue(value: string | string[] | undefined): string | undefined {
  const first = Array.isArray(value) ? value[0] : value;
  return first !== undefined && METADATA_VALUE.test(first) ? first : undefined;
}

function sendOkTrailers(this: http2.ServerHttp2Stream): void {
  this.sendTrailers(OK_TRAILERS);
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
