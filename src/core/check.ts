/**
 * A rate-limit check and its decision, as the core sees them. Nothing here knows about gRPC or
 * Envoy: the gRPC adapter turns the wire request into a `Check` and a `Decision` back into the
 * wire response.
 */

import type { Code, DescriptorStatus, Header } from '@tollgate/client';

// The decision's parts are the client's public types, so that what the service answers and what
// the client reports are one definition.
export type { Code, CurrentLimit, DescriptorStatus, Header, ReportedUnit } from '@tollgate/client';

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
  /**
   * `is_negative_hits`: the cost is given back to the descriptor's counter instead of taken (a
   * refund). Such a descriptor always answers OK and never decides the request.
   */
  isNegativeHits?: boolean;
}

export interface Check {
  domain: string;
  descriptors: Descriptor[];
  /** The request's cost; 0 means 1. */
  hitsAddend: number;
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

/** A header of the request a check came in (gRPC metadata or HTTP), by lower-case name. */
export type RequestHeader = (name: string) => string | string[] | undefined;

/**
 * Reads a header from a request's own headers object (`carrier`). The servers hand over the
 * object they already have and a reader that never changes, so a check allocates nothing for its
 * headers unless something reads them: tracing, for `traceparent`, when it is on.
 */
export type HeaderReader<C> = (carrier: C, name: string) => string | string[] | undefined;

/** A value of the rules' `metadata`, and of the dynamic metadata a decision returns. */
export type JsonValue =
  null | boolean | number | string | JsonValue[] | { [key: string]: JsonValue };
