import type { DescriptorStatus, Header } from '../core/check.js';
import {
  referenceHeaders,
  responseHeaders,
  type HeaderCandidate,
  type ReferenceHeaderNames,
} from './headers.js';
import type { PlannedDescriptor } from './plan.js';

/**
 * Which response headers a decision carries: the IETF RateLimit headers (RATELIMIT_HEADERS), the
 * reference's RateLimit-Limit/-Remaining/-Reset trio (LIMIT_RESPONSE_HEADERS_ENABLED), both or
 * none; and, under COMPAT_MODE=reference, the trio for the descriptor the reference picks.
 * Chosen once, when the limiter is made.
 */
export interface HeaderPolicy {
  headers(input: HeaderInput): Header[];
}

export interface HeaderInput {
  /** The enforced descriptors with a limit, with their statuses. */
  candidates: readonly HeaderCandidate[];
  /** Every descriptor's status, in request order. */
  statuses: readonly DescriptorStatus[];
  /** The descriptors that landed on a counter. */
  counted: readonly PlannedDescriptor[];
  denied: boolean;
  /** When every quota descriptor is over: the soonest of their resets (null: never). */
  quotaRetryMs: number | null | undefined;
}

export interface HeaderChoice {
  ietf: boolean;
  reference: ReferenceHeaderNames | undefined;
  /** COMPAT_MODE=reference: the trio describes the descriptor the reference would pick. */
  referencePick: boolean;
}

const NONE: HeaderPolicy = { headers: () => [] };

export function chooseHeaders(choice: HeaderChoice): HeaderPolicy {
  const { ietf, reference } = choice;
  if (!ietf && reference === undefined) return NONE;
  if (reference === undefined || !choice.referencePick) {
    const kinds = { ietf, reference };
    return {
      headers: (input) =>
        responseHeaders(input.candidates, input.denied, kinds, input.quotaRetryMs),
    };
  }
  const kinds = { ietf, reference: undefined };
  return {
    headers(input) {
      const own = responseHeaders(input.candidates, input.denied, kinds, input.quotaRetryMs);
      if (input.counted.length === 0) return own;
      const byIndex = new Map(input.counted.map((c) => [c.index, c]));
      return own.concat(
        referenceHeaders(
          input.statuses,
          (i) => byIndex.get(i)?.quota === false,
          reference,
          (i) => byIndex.get(i)?.limit.windowMs ?? 0,
        ),
      );
    },
  };
}
