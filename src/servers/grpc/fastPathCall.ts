/**
 * One call on the fast path (see fastPath.ts): its record, and the ways it ends. A reply is
 * static headers, the frame and static trailers; an error is Trailers-Only, as grpc-js sends it.
 * The record rides on its stream, so that the stream's listeners, module-level functions, find it
 * without a closure per call.
 */
import http2 from 'node:http2';
import { status as Status } from '@grpc/grpc-js';
import type { Check, Decision, HeaderReader } from '../../core/check.js';
import type { DecodedRequest, ResponseHeader } from './codec.js';
import type { Guard, GuardedCall } from './guard.js';
import { toGrpcStatus } from './status.js';

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

export const READING = 0;
export const DECIDING = 1;
export const DONE = 2;

export interface Call {
  options: FastPathOptions;
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

export const CALL = Symbol('tollgate.call');
export type CallStream = http2.ServerHttp2Stream & { [CALL]?: Call };

const OK_HEADERS = {
  [http2.constants.HTTP2_HEADER_STATUS]: 200,
  [http2.constants.HTTP2_HEADER_CONTENT_TYPE]: 'application/grpc+proto',
  'grpc-accept-encoding': 'identity,deflate,gzip',
  'grpc-encoding': 'identity',
};
const OK_OPTIONS = { waitForTrailers: true };
const OK_TRAILERS = { 'grpc-status': Status.OK, 'grpc-message': 'OK' };
const END_STREAM = { endStream: true };

/** Nothing more happens on the call: its timer and its buffers go. */
export function finish(call: Call): void {
  call.phase = DONE;
  if (call.deadline !== undefined) clearTimeout(call.deadline);
  call.deadline = undefined;
  call.parts = undefined;
  call.backlog = undefined;
}

/** Ends the call with a Trailers-Only response, as grpc-js sends every error. */
export function fail(call: Call, code: Status, details: string): void {
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
  respond(call, trailers, END_STREAM);
}

/** Fails the call with the status of an error, as the grpc-js path does (status.ts). */
export function failWith(call: Call, error: unknown): void {
  const status = toGrpcStatus(error);
  if (status.code === Status.INTERNAL) call.options.onInternalError?.(error);
  fail(call, status.code, status.details);
}

/** Sends the reply frame, unless a deadline or a cancel ended the call while it was decided. */
export function answer(call: Call, frame: Buffer): void {
  if (call.phase !== DECIDING) return;
  finish(call);
  const { stream } = call;
  if (stream.destroyed || stream.closed) return;
  respond(call, OK_HEADERS, OK_OPTIONS, frame);
}

/** Node throws when the session went away under the stream: the call is over, nothing more. */
function respond(
  call: Call,
  headers: http2.OutgoingHttpHeaders,
  respondOptions: http2.ServerStreamResponseOptions,
  frame?: Buffer,
): void {
  const { stream } = call;
  try {
    stream.respond(headers, respondOptions);
    if (frame === undefined) return;
    stream.on('wantTrailers', sendOkTrailers);
    stream.end(frame);
  } catch (error) {
    call.options.onInternalError?.(error);
    stream.destroy();
  }
}

function sendOkTrailers(this: http2.ServerHttp2Stream): void {
  this.sendTrailers(OK_TRAILERS);
}

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
export const readStreamHeader: HeaderReader<http2.IncomingHttpHeaders> = (headers, name) => {
  if (name.startsWith(':') || name.endsWith('-bin') || NOT_METADATA.has(name)) return undefined;
  const value = headers[name];
  if (value === undefined) return undefined;
  const values = (Array.isArray(value) ? value : [value]).filter((v) => METADATA_VALUE.test(v));
  return values.length === 0 ? undefined : values;
};

/** A header's first value as grpc-js's Metadata keeps it: printable ASCII only. */
export function metadataValue(value: string | string[] | undefined): string | undefined {
  const first = Array.isArray(value) ? value[0] : value;
  return first !== undefined && METADATA_VALUE.test(first) ? first : undefined;
}
