import type { Algorithm } from '../rules/types.js';

/**
 * The seam between the limiter and where counters live.
 *
 * Invariants every store keeps:
 * - `decide` is atomic: either every counter fits its cost and every cost is consumed, or nothing
 *   is consumed anywhere. No other decision interleaves with it.
 * - It makes one round trip to its backend (one Redis script call on a single Redis).
 * - Time never runs backwards for a counter: a decision uses the later of `nowMs` (or the store's
 *   own clock) and the time last written to the counter.
 * - Every counter it writes expires once it no longer affects any decision.
 * - Given the same counters, costs and clock, every store returns the same results.
 * - Failures reject with `StoreError`; they never resolve to a decision.
 */
export interface Store {
  decide(counters: readonly CounterCheck[], nowMs: number | undefined): Promise<StoreDecision>;
  /** Deletes these counters (an operator's reset); resolves with how many existed. */
  reset(keys: readonly string[]): Promise<number>;
  /** Resolves once the store can take decisions, rejects with `StoreError` otherwise. */
  ping(): Promise<void>;
  close(): Promise<void>;
}

/** One counter of a request. Descriptors that share a counter arrive here as one check. */
export interface CounterCheck {
  /** The store key: unambiguous, hash-tagged by tenant (see `keys.ts`). */
  key: string;
  algorithm: Algorithm;
  windowMs: number;
  /** L: requests per window (for the token bucket, the refill per window). */
  limit: number;
  /** B: the token bucket's capacity; equals `limit` for the window algorithms. */
  burst: number;
  /**
   * The summed cost of the counter's descriptors, capped at COST_CAP. 0 checks without
   * consuming: the counter fits when one unit would fit.
   */
  cost: number;
}

/** Larger than any limit or burst (both are uint32), and exact as a double. */
export const COST_CAP = 2 ** 33;

export interface CounterResult {
  /** The counter fits its cost, whatever the others did. */
  fits: boolean;
  /** Whole units left after the decision (unchanged when nothing was consumed). */
  remaining: number;
  /** Milliseconds until it resets (see README's table), or NEVER when the cost exceeds the limit. */
  resetMs: number;
}

export const NEVER = -1;

export interface StoreDecision {
  /** Every counter fit, so every cost was consumed. */
  allowed: boolean;
  results: CounterResult[];
}
