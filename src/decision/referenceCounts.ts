import type { RuleCounts } from './outcome.js';

/**
 * COMPAT_MODE=reference: how envoyproxy/ratelimit splits a descriptor's hits among its statistics,
 * from the count after the call (`after`; undefined when the descriptor was answered from the
 * local cache). A call that passes the limit counts as over only the hits past it, and as near
 * the hits between the near threshold and the limit; the near threshold is the limit times
 * NEAR_LIMIT_RATIO in single precision, rounded down.
 *
 * The count before the call is taken as `after - hits` even when the call incremented nothing
 * (STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT), as the reference does, and like its unsigned
 * arithmetic a negative difference is larger than any threshold.
 */
export function referenceCounts(
  limit: number,
  after: number | undefined,
  hits: number,
  nearRatio: number,
  shadow: boolean,
): RuleCounts {
  const counts: RuleCounts = { over: 0, near: 0, within: 0, shadow: 0, localCache: 0 };
  if (after === undefined) {
    counts.over = counts.localCache = hits;
    if (shadow) counts.shadow = hits;
    return counts;
  }
  const before = after >= hits ? after - hits : Number.POSITIVE_INFINITY;
  const near = Math.floor(Math.fround(Math.fround(limit) * Math.fround(nearRatio)));
  if (after > limit) {
    if (before >= limit) counts.over = hits;
    else {
      counts.over = after - limit;
      counts.near = limit - Math.max(near, before);
    }
    if (shadow) counts.shadow = before >= limit ? hits : after - limit;
    return counts;
  }
  counts.within = hits;
  if (after > near) counts.near = before >= near ? hits : after - near;
  return counts;
}
