import type { Algorithm } from '../rules/types.js';
import type { Calendar } from '../rules/calendar.js';

/**
 * The seam between the limiter and where counters live.
 *
 * Invariants every store keeps:
 * - `decide` is atomic: no other decision interleaves with it.
 * - All or nothing: the request is allowed when every enforced counter fits and, if it has quota
 *   counters, one of them fits. Then the enforced counters and the fitting quota counters are
 *   consumed; otherwise none is. Shadow counters are consumed when they fit, and overdraw
 *   counters always, recorded in full past their limit, whatever the others do. Give-back counters
 *   (`giveBack`) are settled last, in order, from what the request's charges left.
 * - It makes one round trip to its backend (one Redis script call on a single Redis).
 * - Time never runs backwards for a counter: a decision uses the later of `nowMs` (or the store's
 *   own clock) and the time last written to the counter.
 * - Every counter it writes expires once it no longer affects any decision.
 * - Given the same counters, costs and clock, every store returns the same results.
 * - Failures reject with `StoreError`; they never resolve to a decision. A failure that belongs
 *   to one counter (a key holding a foreign value) fails only the requests that touch it, even
 *   when requests share a backend call, and such a request has written nothing.
 *
 * On Redis Cluster, a request whose counters share a slot (one tenant) keeps all of these. A
 * request that spans slots is one call per slot, in parallel, each atomic on its own slot:
 * - No limit is exceeded: the request is allowed only when every slot allowed its counters.
 * - What a denied request consumed on the other slots is refunded by a second call, which the
 *   decision does not wait for. Until it lands a later decision still sees those counts, and a
 *   refund after the window rolled over gives back less or nothing: it may under-admit, never
 *   over-admit.
 * - One round trip: the calls run at once. Only a denial adds the refund's.
 * - Its results are the ones a single Redis would give in the same sequence of decisions, but
 *   one: in a denied request, a give-back on a counter that the request also charged reports
 *   what is left (and its reset) with that charge still counted; it is given back a moment later.
 * - A slot that fails fails the whole request.
 */
export interface Store {
  decide(counters: readonly CounterCheck[], nowMs: number | undefined): Promise<StoreDecision>;
  /** Deletes these counters (an operator's reset); resolves with how many existed. */
  reset(keys: readonly string[]): Promise<number>;
  /** How many of these counters exist, reading nothing else and writing nothing. */
  exists(keys: readonly string[]): Promise<number>;
  /** Resolves once the store is reachable, rejects with `StoreError` otherwise. */
  ping(): Promise<void>;
  /**
   * Resolves when the store can decide a check now: the whole path a check takes (on Redis, the
   * script by EVAL and by EVALSHA, its clock, its reads and writes) run on a counter reserved
   * for the probe, on every node a check may need. Rejects with the `StoreError` a check would
   * get. `nowMs` as for `decide`.
   */
  probe(nowMs: number | undefined): Promise<void>;
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
  /** Outside the all-or-nothing gate: consumed when it fits, never blocks the others. */
  shadow: boolean;
  /** Blocks the request only when every quota counter of it is over. */
  quota: boolean;
  /** Consumed even when over, recorded in full (a token bucket goes at most one burst into debt). */
  overdraw: boolean;
  /**
   * With overdraw, for requests already admitted elsewhere (RLQS reports), which must land in
   * full: a token bucket goes up to DEEP_DEBT_MS of refills deeper into debt than one burst.
   */
  deepDebt?: boolean;
  /**
   * is_negative_hits: outside the gate, and settled after the request's other counters, its
   * cost is given back instead of taken, never below an empty window or above a full bucket. It
   * always fits. A counter that does not exist is not created. Never merged with another.
   */
  giveBack?: boolean;
  /** COMPAT_MODE=reference, fixed windows only: counted as envoyproxy/ratelimit counts. */
  reference?: ReferenceCounting;
  /** Set the TTL on this write even if the window's first write did (the health probe). */
  renew?: boolean;
  /** A calendar window (fixed windows only): its period and zone, from the rule. */
  calendar?: Calendar;
  /**
   * With `calendar`: four boundaries in ms, the starts of the periods before, at, after and two
   * after the service's clock; computed from the decision's now (or this process's clock) when
   * absent. The store decides in the one that holds its own now.
   */
  bounds?: readonly number[];
}

/**
 * The reference's counting (see lua/dispatch.lua): the counter is incremented whatever the
 * others do, so its count may pass the limit, and it fits when its count after the call is at
 * most the limit. Its result's `remaining` is that count. Such counters are never merged: two
 * descriptors of one key are two counters, counted one after the other.
 */
export interface ReferenceCounting {
  /** STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT: when some counter would pass its limit, only those
   * that would are incremented. */
  stop: boolean;
  /** With stop: another counter of the request is remembered over, so none is incremented. */
  held: boolean;
  /** The service remembers this counter over: not incremented, and it does not fit. */
  cached: boolean;
}

/**
 * The largest cost a counter takes: exact as a double (2^53 - 1), and larger than any limit or
 * burst (both are uint32), so that a cost past it could never fit either. Costs up to it are
 * charged and given back exactly; an overdraw records counts up to 2^52 (2^33 - 1 in a sliding
 * window), see lua/lib.lua.
 */
export const COST_CAP = Number.MAX_SAFE_INTEGER;

/**
 * How much deeper than one burst a deep overdraw (`deepDebt`) takes a token bucket into debt, in
 * ms of its refills: the longest time an RLQS report covers (rlqs/trust.ts). lua/token_bucket.lua
 * has the same.
 */
export const DEEP_DEBT_MS = 300_000;

export interface CounterResult {
  /** The counter fits its cost, whatever the others did. */
  fits: boolean;
  /** Whole units left after the decision (unchanged when nothing was consumed). */
  remaining: number;
  /**
   * An overdraw counter past its limit after the decision: by how much (a window's count past
   * L, a token bucket's debt in whole tokens). Absent within the limit, and for other counters.
   */
  past?: number;
  /**
   * Milliseconds until it resets (see the table in docs/decisions.md), or NEVER when the cost
   * exceeds the limit.
   */
  resetMs: number;
}

export const NEVER = -1;

export interface StoreDecision {
  /** The request is allowed (see the invariants above). */
  allowed: boolean;
  results: CounterResult[];
  /** Answered from memory in front of the store (see cachedStore.ts), without a backend call. */
  fromCache?: boolean;
}
