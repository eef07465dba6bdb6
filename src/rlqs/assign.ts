/**
 * Fair assignments, as pure arithmetic: from a rule's rate and each consumer's recent demand, the
 * token bucket an RLQS stream enforces for one bucket. No I/O and no clock, so each case can be
 * tested by its numbers.
 *
 * - A window rule of L per W refills at R = L/W; a token-bucket rule at R with its burst B.
 * - A consumer (one bucket on one stream) gets the share of R in proportion to its recent demand
 *   (allowed plus denied); when no consumer has reported demand yet, the consumers split R evenly.
 * - A bucket under several rules (a tenant's and a route's) takes the smallest of its shares.
 * - Envoy's token bucket fills continuously at tokens_per_fill / fill_interval, up to max_tokens,
 *   and a new one starts full (one that replaces a token bucket starts as full, in proportion, as
 *   the one it replaces). So the rate is written over a long fill, precise to a fraction of a
 *   percent, and max_tokens is what a new bucket's start costs: half a second of the share for a
 *   window rule, the share of the burst for a token-bucket rule.
 * - A strategy changes only when the rate it should have has moved for good (`settle`): the
 *   shares settle, and a client is not handed new buckets for noise.
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

/** A fill of at least this many tokens keeps the rate within 0.5% of the share, rounded down. */
const PRECISE_TOKENS = 200;
/** The longest fill interval, for a rule slower than PRECISE_TOKENS a day. */
const MAX_FILL_SECONDS = 86_400;
/** A window rule's bucket holds this much of its rate: what its start costs (charging.ts). */
export const START_MS = 500;

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
 * PRECISE_TOKENS (within the rule's window and a day), the fill rounded down to whole tokens (at
 * least one), and a capacity of the burst's share, or of START_MS of the rate for a window rule.
 */
export function tokenBucketFor(budget: {
  ratePerSecond: number;
  burst: number | undefined;
  windowMs: number;
}): TokenBucketStrategy {
  const rate = Math.max(0, budget.ratePerSecond);
  const longest = Math.max(1, Math.min(MAX_FILL_SECONDS, Math.floor(budget.windowMs / 1000)));
  const wanted = rate > 0 ? Math.ceil(PRECISE_TOKENS / rate) : longest;
  const fillIntervalSeconds = Math.min(longest, Math.max(1, wanted));
  // Rounded down, so that the shares never add up to more than R.
  const tokensPerFill = Math.max(1, Math.floor(rate * fillIntervalSeconds + 1e-9));
  const capacity =
    budget.burst === undefined ? Math.ceil((rate * START_MS) / 1000) : Math.round(budget.burst);
  return { maxTokens: Math.max(1, capacity), tokensPerFill, fillIntervalSeconds };
}

/** A report covering less than this is brief (see `settle`); Envoy reports every 100 ms at most. */
export const BRIEF_REPORT_MS = 50;
/** A rate within this part of the one assigned is the same rate: it is not sent again. */
const SAME_RATE = 0.01;
/** A rate that falls by more than this part is sent at once; one that rises so, at the second ask. */
const AT_ONCE = 0.05;
/** A smaller move is sent once this many reports in a row have asked for it, the same way... */
const SETTLE_REPORTS = 3;
/**
 * ...over at least this long: with 500 ms reports, three in a row of noise the same way are
 * common (16 clients each had their assignments changed 34 times in a run), eleven are not.
 */
const SETTLE_MS = 5_000;
/** A larger rise is sent once this many reports in a row have asked for one. */
const RISE_REPORTS = 2;

/** The rate a bucket enforces, and the reports in a row that asked for another (+ up, - down). */
export interface Settled {
  rate: number;
  streak: number;
  /** When the first report of the streak came, in ms of any monotonic clock. */
  since: number;
}

/**
 * The rate to enforce, given the one enforced and the one the shares give now, at `atMs`.
 * - A fall past AT_ONCE is taken at once (a client joined): a share kept while it falls would
 *   sit on top of the others'.
 * - A rise past it is taken when the next report asks for one too (a client left): a single
 *   report that sees fewer clients than there are (their demand not recorded in time, after the
 *   store was out) does not hand out their shares, at the cost of one reporting interval. Once
 *   taken, each further report that asks for a rise again is taken too.
 * - A `brief` report (Envoy's own at once after a changed assignment, or for a new bucket: it
 *   covers a few milliseconds and says little of a rate) takes a fall past AT_ONCE, and else
 *   leaves the rate and the streak as they are: it neither starts a run nor breaks one.
 * - A smaller move is taken once it holds for SETTLE_REPORTS reports and SETTLE_MS: noise goes
 *   both ways and resets the streak, so the rate stays put, but a real move is always taken, so
 *   a rate cannot freeze away from its share.
 */
export function settle(
  last: Settled | undefined,
  target: number,
  atMs: number,
  brief = false,
): Settled {
  const taken = { rate: target, streak: 0, since: atMs };
  if (last === undefined || last.rate <= 0) return taken;
  const move = (target - last.rate) / last.rate;
  if (move < -AT_ONCE) return taken;
  if (brief) return last;
  if (Math.abs(move) <= SAME_RATE) return { rate: last.rate, streak: 0, since: atMs };
  const continues = move > 0 ? last.streak > 0 : last.streak < 0;
  const streak = (continues ? last.streak : 0) + Math.sign(move);
  const since = continues ? last.since : atMs;
  if (move > AT_ONCE) {
    // The streak is kept: a rise that goes on (a joining bucket's demand, measured over longer
    // and longer spans) is followed report by report, not held two more reports at each step.
    if (Math.abs(streak) >= RISE_REPORTS) return { rate: target, streak, since: atMs };
  } else if (Math.abs(streak) >= SETTLE_REPORTS && atMs - since >= SETTLE_MS) {
    return taken;
  }
  return { rate: last.rate, streak, since };
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
