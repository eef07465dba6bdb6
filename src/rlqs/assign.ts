/**
 * Fair assignments, as pure arithmetic: from a rule's rate and each consumer's recent demand, the
 * token bucket an RLQS stream enforces for one bucket. No I/O and no clock, so each case can be
 * tested by its numbers.
 *
 * - A window rule of L per W refills at R = L/W; a token-bucket rule at R with its burst B.
 * - A consumer (one bucket on one stream) gets the share of R in proportion to its recent demand
 *   (allowed plus denied); when no consumer has reported demand yet, the consumers split R evenly.
 * - A bucket under several rules (a tenant's and a route's) takes the smallest of its shares.
 * - Envoy's token bucket starts full, so a new strategy may hand the client a whole bucket: the
 *   strategy changes only when the rate rises by more than CHANGE_RATIO, or falls by more than
 *   DECREASE_RATIO (so that the shares never add up to much more than R).
 */

/** What a rule lets through, as a rate. */
export interface Pool {
  /** R, tokens per second. */
  ratePerSecond: number;
  /** B for a token-bucket rule; undefined for the window algorithms. */
  burst: number | undefined;
  windowMs: number;
}

/** A consumer's part of a pool. */
export interface PoolShare {
  pool: Pool;
  /** This consumer's recent demand (allowed plus denied per second, or any common unit). */
  demand: number;
  /** The sum over every live consumer of the pool, this one included. */
  totalDemand: number;
  /** How many live consumers the pool has, this one included (at least 1). */
  consumers: number;
}

export interface TokenBucketStrategy {
  maxTokens: number;
  tokensPerFill: number;
  fillIntervalSeconds: number;
}

/** A strategy is replaced only when the rate moves by more than this part of the last one. */
export const CHANGE_RATIO = 0.1;
/** A fill of at least this many tokens keeps rounding within 2.5% of the rate. */
const MIN_TOKENS_PER_FILL = 20;
/** The longest fill interval: a slow rule fills at most this far apart. */
const MAX_FILL_SECONDS = 60;

export function shareOf(share: Omit<PoolShare, 'pool'>): number {
  if (share.totalDemand <= 0 || share.demand < 0) return 1 / Math.max(1, share.consumers);
  return Math.min(1, share.demand / share.totalDemand);
}

/** The consumer's rate and capacity: its share of every pool, the smallest of them. */
export function consumerBudget(shares: readonly PoolShare[]): {
  ratePerSecond: number;
  burst: number | undefined;
  windowMs: number;
} {
  let rate = Infinity;
  let burst: number | undefined;
  let windowMs = Infinity;
  for (const share of shares) {
    const part = shareOf(share);
    const poolRate = part * share.pool.ratePerSecond;
    if (poolRate < rate) {
      rate = poolRate;
      burst = share.pool.burst === undefined ? undefined : part * share.pool.burst;
      windowMs = share.pool.windowMs;
    }
  }
  return { ratePerSecond: rate, burst, windowMs };
}

/**
 * The token bucket for a rate: the shortest whole-second fill interval whose fill is at least
 * MIN_TOKENS_PER_FILL (within the rule's window and a minute), the fill rounded down to whole
 * tokens (at least one), and a capacity of the burst's share, or of one fill for a window rule.
 */
export function tokenBucketFor(budget: {
  ratePerSecond: number;
  burst: number | undefined;
  windowMs: number;
}): TokenBucketStrategy {
  const rate = Math.max(0, budget.ratePerSecond);
  const longest = Math.max(1, Math.min(MAX_FILL_SECONDS, Math.floor(budget.windowMs / 1000)));
  const wanted = rate > 0 ? Math.ceil(MIN_TOKENS_PER_FILL / rate) : longest;
  const fillIntervalSeconds = Math.min(longest, Math.max(1, wanted));
  // Rounded down, so that the shares never add up to more than R.
  const tokensPerFill = Math.max(1, Math.floor(rate * fillIntervalSeconds + 1e-9));
  const capacity = budget.burst === undefined ? tokensPerFill : Math.round(budget.burst);
  return { maxTokens: Math.max(tokensPerFill, capacity), tokensPerFill, fillIntervalSeconds };
}

/** A share that falls by more than this part of the last one is sent at once. */
export const DECREASE_RATIO = 0.02;

/**
 * Whether a new rate is far enough from the one last assigned to send a new strategy: up by more
 * than CHANGE_RATIO, or down by more than DECREASE_RATIO. A share kept while it falls would let
 * the streams' rates add up to more than R; one kept while it rises only under-admits.
 */
export function movedEnough(lastRate: number | undefined, rate: number): boolean {
  if (lastRate === undefined) return true;
  if (lastRate === 0) return rate > 0;
  if (rate < lastRate) return lastRate - rate > DECREASE_RATIO * lastRate;
  return rate - lastRate > CHANGE_RATIO * lastRate;
}

/**
 * An assignment's time to live: a few reporting intervals (learned from the reports'
 * `time_elapsed`), never less than the floor. Until a bucket's reports show its interval (its
 * first assignment answers an immediate report, of 0 s), the interval is taken as Envoy's
 * filter as released reports, every RELEASED_REPORTING_MS whatever its `reporting_interval`: so
 * that no assignment expires before the next report of a live stream.
 */
export const TTL_INTERVALS = 3;
export const RELEASED_REPORTING_MS = 5_000;
export function assignmentTtlMs(reportingIntervalMs: number | undefined, floorMs: number): number {
  const interval =
    reportingIntervalMs !== undefined && reportingIntervalMs > 0
      ? reportingIntervalMs
      : RELEASED_REPORTING_MS;
  return Math.max(floorMs, Math.ceil(TTL_INTERVALS * interval));
}
