/**
 * A rate-limit check and its decision, as the core sees them. Nothing here knows about gRPC or
 * Envoy: the gRPC adapter turns the wire request into a `Check` and a `Decision` back into the
 * wire response.
 */

import type { JsonValue } from './rules/types.js';

export interface Entry {
  key: string;
  value: string;
}

/** Units a caller may name in a limit override (Envoy's `envoy.type.v3.RateLimitUnit`). */
export type OverrideUnit = 'second' | 'minute' | 'hour' | 'day' | 'month' | 'year';

export interface LimitOverride {
  requestsPerUnit: number;
  unit: OverrideUnit;
}

export interface Descriptor {
  entries: Entry[];
  limit?: LimitOverride;
  /** The descriptor's own cost. Overrides the request's; an explicit 0 checks without consuming. */
  hitsAddend?: bigint;
}

export interface Check {
  domain: string;
  descriptors: Descriptor[];
  /** The request's cost; 0 means 1. */
  hitsAddend: number;
}

export type Code = 'OK' | 'OVER_LIMIT';

/** Units reported back in `current_limit`; `unknown` marks a window that is not one whole unit. */
export type ReportedUnit =
  'unknown' | 'second' | 'minute' | 'hour' | 'day' | 'week' | 'month' | 'year';

export interface CurrentLimit {
  requestsPerUnit: number;
  unit: ReportedUnit;
  name: string;
}

export interface DescriptorStatus {
  code: Code;
  currentLimit?: CurrentLimit;
  /** Whole units left after this decision. */
  limitRemaining: number;
  /** Milliseconds until the counter resets (see README); absent when there is no limit or it can never fit. */
  durationUntilResetMs?: number;
}

export interface Header {
  key: string;
  value: string;
}

export interface Decision {
  code: Code;
  /** One per descriptor of the check, in the same order. */
  statuses: DescriptorStatus[];
  /** Added to the downstream response (`response_headers_to_add`). */
  headers?: Header[];
  /** Merged `metadata` of the matched rules, when RESPONSE_DYNAMIC_METADATA is on. */
  dynamicMetadata?: Record<string, JsonValue>;
}

/**
 * A header of the request a check came in (gRPC metadata or HTTP), by lower-case name. A function,
 * so that nothing is read unless something asks: tracing, for `traceparent`, when it is on.
 */
export type RequestHeader = (name: string) => string | string[] | undefined;
