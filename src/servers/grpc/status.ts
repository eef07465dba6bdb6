/**
 * The one place where an error becomes a gRPC status. Never UNKNOWN: operators and Envoy cannot
 * tell an UNKNOWN apart from a crash.
 */
import { status as Status } from '@grpc/grpc-js';
import {
  InvalidRequestError,
  NoRulesError,
  ResourceLimitError,
  StoreError,
} from '../../core/errors.js';

export interface GrpcStatus {
  code: Status;
  details: string;
}

export function toGrpcStatus(error: unknown): GrpcStatus {
  if (error instanceof InvalidRequestError) {
    return { code: Status.INVALID_ARGUMENT, details: error.message };
  }
  if (error instanceof ResourceLimitError) {
    return { code: Status.RESOURCE_EXHAUSTED, details: error.message };
  }
  // UNAVAILABLE lets Envoy's failure_mode_deny decide what a store outage means.
  if (error instanceof StoreError) {
    return { code: Status.UNAVAILABLE, details: `store unavailable: ${error.message}` };
  }
  if (error instanceof NoRulesError) return { code: Status.UNAVAILABLE, details: error.message };
  // An unexpected error is a bug here; its message may expose internals, so it is not sent.
  return { code: Status.INTERNAL, details: 'internal error' };
}
