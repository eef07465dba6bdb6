/**
 * The token bucket's integer arithmetic. The store keeps tokens scaled by `scale` so that each
 * millisecond adds exactly `refill` scaled tokens: no fractions, no drift. Lua numbers are
 * doubles, exact below 2^53; scaled amounts stay within 2^52, leaving room for the rounding-up
 * division (which adds the refill) to stay exact. Used at load time and again for
 * request-time limit overrides.
 */

const MAX_EXACT = 2n ** 52n;

function gcd(a: number, b: number): number {
  while (b !== 0) [a, b] = [b, a % b];
  return a;
}

/** `limit` tokens per `windowMs` as `refill` scaled tokens per millisecond, one token being `scale`. */
export function tokenBucketScale(
  limit: number,
  windowMs: number,
): { scale: number; refill: number } {
  const g = gcd(limit, windowMs);
  return { scale: windowMs / g, refill: limit / g };
}

/** Why this bucket cannot be kept exactly in integers, or undefined when it can. */
export function checkTokenBucketExact(
  limit: number,
  windowMs: number,
  burst: number,
): string | undefined {
  if (limit <= 0) return undefined; // a zero-rate bucket never refills, so nothing is scaled
  const { scale } = tokenBucketScale(limit, windowMs);
  if (BigInt(burst) * BigInt(scale) <= MAX_EXACT) return undefined;
  return (
    `token bucket too fine for exact integer arithmetic: burst ${burst} × ${scale} ` +
    `(window ${windowMs}ms / gcd with requests_per_unit) exceeds 2^52; ` +
    'use a shorter unit or window, or a smaller burst'
  );
}
