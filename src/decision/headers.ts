import type { DescriptorStatus, Header } from '../core/check.js';
import type { Limit } from '../rules/types.js';

/**
 * Response headers, from the statuses of a decision (draft-ietf-httpapi-ratelimit-headers-10):
 *
 *   RateLimit-Policy: "NAME";q=QUOTA;w=WINDOW_SECONDS
 *   RateLimit: "NAME";r=REMAINING;t=SECONDS_UNTIL_RESET
 *   Retry-After: SECONDS        (OVER_LIMIT only: the longest reset among the denying descriptors,
 *                                and none when one of them can never pass; when every quota
 *                                descriptor is over, the first of them to free up counts too)
 *
 * They describe the enforced, limited descriptor with the smallest remaining (a tie goes to the
 * longer reset). A token bucket's quota is its burst B, over ceil(B/R) seconds. The reference's
 * RateLimit-Limit/-Remaining/-Reset trio can be added under configurable names.
 */
export interface HeaderCandidate {
  limit: Limit;
  status: DescriptorStatus;
}

export interface ReferenceHeaderNames {
  limit: string;
  remaining: string;
  reset: string;
}

/** Which headers a response carries: the IETF ones (RATELIMIT_HEADERS), the reference's, both. */
export interface HeaderKinds {
  ietf: boolean;
  reference: ReferenceHeaderNames | undefined;
}

export function responseHeaders(
  candidates: readonly HeaderCandidate[],
  denied: boolean,
  kinds: HeaderKinds,
  /** When every quota descriptor is over: the soonest of their resets (undefined: never). */
  quotaRetryMs?: number | null,
): Header[] {
  const reference = kinds.reference;
  if (!kinds.ietf && reference === undefined) return [];
  let best: HeaderCandidate | undefined;
  let retryAfterMs: number | undefined;
  let neverPasses = false;
  for (const candidate of candidates) {
    const { status } = candidate;
    const reset = status.durationUntilResetMs;
    if (denied && status.code === 'OVER_LIMIT') {
      if (reset === undefined) neverPasses = true;
      else retryAfterMs = Math.max(retryAfterMs ?? 0, reset);
    }
    if (
      best === undefined ||
      status.limitRemaining < best.status.limitRemaining ||
      (status.limitRemaining === best.status.limitRemaining &&
        (reset ?? -1) > (best.status.durationUntilResetMs ?? -1))
    ) {
      best = candidate;
    }
  }
  if (best === undefined) return [];

  const { limit, status } = best;
  const { name, policy, windowSeconds } = policyOf(limit);
  const resetSeconds =
    status.durationUntilResetMs === undefined
      ? undefined
      : Math.ceil(status.durationUntilResetMs / 1000);

  const headers: Header[] = [];
  if (kinds.ietf) {
    headers.push(
      { key: 'RateLimit-Policy', value: policy },
      {
        key: 'RateLimit',
        value: `${name};r=${status.limitRemaining}${resetSeconds === undefined ? '' : `;t=${resetSeconds}`}`,
      },
    );
    if (denied && quotaRetryMs !== undefined) {
      if (quotaRetryMs === null) neverPasses = true;
      else retryAfterMs = Math.max(retryAfterMs ?? 0, quotaRetryMs);
    }
    if (retryAfterMs !== undefined && !neverPasses) {
      headers.push({ key: 'Retry-After', value: String(Math.ceil(retryAfterMs / 1000)) });
    }
  }
  if (reference !== undefined) {
    headers.push(
      { key: reference.limit, value: String(limit.requestsPerUnit) },
      { key: reference.remaining, value: String(status.limitRemaining) },
      { key: reference.reset, value: String(resetSeconds ?? windowSeconds) },
    );
  }
  return headers;
}

interface Policy {
  /** The quoted name, as both IETF headers give it. */
  name: string;
  /** RateLimit-Policy's value. */
  policy: string;
  windowSeconds: number;
}

/** What a limit's headers say whatever its counter holds, made once per limit of the rules. */
const policies = new WeakMap<Limit, Policy>();

function policyOf(limit: Limit): Policy {
  let known = policies.get(limit);
  if (known === undefined) {
    const name = `"${policyName(limit.name)}"`;
    const windowSeconds = limit.windowMs / 1000;
    const [quota, window] =
      limit.algorithm === 'token_bucket'
        ? [
            limit.burst,
            limit.requestsPerUnit > 0
              ? Math.ceil((limit.burst * windowSeconds) / limit.requestsPerUnit)
              : windowSeconds,
          ]
        : [limit.requestsPerUnit, windowSeconds];
    known = { name, policy: `${name};q=${quota};w=${window}`, windowSeconds };
    policies.set(limit, known);
  }
  return known;
}

/** A structured-field string holds printable ASCII, with `"` and `\` escaped. */
function policyName(name: string): string {
  if (name === '') return 'default';
  let safe = '';
  for (const char of name) {
    const code = char.charCodeAt(0);
    safe += char === '"' || char === '\\' ? `\\${char}` : code >= 0x20 && code < 0x7f ? char : '_';
  }
  return safe;
}

/**
 * COMPAT_MODE=reference: the reference's RateLimit-Limit/-Remaining/-Reset, for the descriptor it
 * picks. In request order, a descriptor with a limit (shadow, quota and overrides included) is
 * picked when its remaining is below every earlier one's; an enforced descriptor that is over is
 * picked whatever its remaining, so the last of them wins.
 */
export function referenceHeaders(
  statuses: readonly DescriptorStatus[],
  enforced: (index: number) => boolean,
  names: ReferenceHeaderNames,
  windowMsOf: (index: number) => number,
): Header[] {
  let picked = -1;
  let least = 4_294_967_295;
  statuses.forEach((status, i) => {
    if (status.currentLimit === undefined) return;
    if (status.limitRemaining < least) {
      picked = i;
      least = status.limitRemaining;
    }
    if (status.code === 'OVER_LIMIT' && enforced(i)) {
      picked = i;
      least = 0;
    }
  });
  const status = statuses[picked];
  if (status?.currentLimit === undefined) return [];
  const resetMs = status.durationUntilResetMs ?? windowMsOf(picked);
  return [
    { key: names.limit, value: String(status.currentLimit.requestsPerUnit) },
    { key: names.remaining, value: String(status.limitRemaining) },
    { key: names.reset, value: String(Math.ceil(resetMs / 1000)) },
  ];
}
