/**
 * The one place where an error becomes an HTTP answer, as `grpc/status.ts` is for gRPC: the same
 * errors, the same messages.
 */
import { InvalidRequestError, NoRulesError, StoreError } from '../../core/errors.js';

export interface HttpReply {
  status: number;
  /** A Buffer is sent as it is: a large body built once is not copied per request. */
  body: string | Buffer;
  contentType: string;
  headers?: Record<string, string>;
  /** Close the connection after answering, e.g. when the request body was left unread. */
  close?: boolean;
}

const plain = 'text/plain; charset=utf-8';

export function toHttpError(error: unknown, onInternalError?: (error: unknown) => void): HttpReply {
  if (error instanceof InvalidRequestError) {
    return { status: 400, body: error.message, contentType: plain };
  }
  // FAILURE_MODE=error: 503 is the HTTP side of gRPC's UNAVAILABLE.
  if (error instanceof StoreError) {
    return { status: 503, body: `store unavailable: ${error.message}`, contentType: plain };
  }
  if (error instanceof NoRulesError)
    return { status: 503, body: error.message, contentType: plain };
  // An unexpected error is a bug here; its message may expose internals, so it is not sent.
  onInternalError?.(error);
  return { status: 500, body: 'internal error', contentType: plain };
}
