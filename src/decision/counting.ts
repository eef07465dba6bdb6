import { referenceCounts } from './referenceCounts.js';
import type { RuleCounts } from './outcome.js';
import type { Limit } from '../rules/types.js';
import { COST_CAP, type CounterCheck, type CounterResult } from '../store/Store.js';

/**
 * How descriptors become counters and how a counter's result reads back: tollgate's own counting,
 * or envoyproxy/ratelimit's (COMPAT_MODE=reference). Chosen once, when the limiter is made.
 */
export interface CountingPolicy {
  /** Puts a descriptor's counter into `counters`, or adds it to one there; returns its slot. */
  add(
    counters: CounterCheck[],
    key: string,
    limit: Limit,
    cost: number,
    shadow: boolean,
    quota: boolean,
  ): number;
  /**
   * Puts a refund's counter into `counters`, never merged with another (see Store.ts's
   * `giveBack`); returns its slot.
   */
  addGiveBack(counters: CounterCheck[], key: string, limit: Limit, cost: number): number;
  /** What the descriptor has left, from its counter's result. */
  remaining(limit: Limit, counter: CounterCheck, result: CounterResult): number;
  /** How the statistics split its hits; undefined for tollgate's own split (see splitHits). */
  counts(
    limit: Limit,
    counter: CounterCheck,
    result: CounterResult,
    hits: number,
    shadow: boolean,
  ): RuleCounts | undefined;
}

/**
 * tollgate's counting: descriptors of one key share one counter, whose result's `remaining` is
 * what is left of it.
 */
export const ownCounting: CountingPolicy = {
  add: addCounter,
  addGiveBack: (counters, key, limit, cost) => counters.push(giveBackCounter(key, limit, cost)) - 1,
  remaining: (_limit, _counter, result) => result.remaining,
  counts: () => undefined,
};

/**
 * The reference's counting, for fixed windows: each descriptor is a counter of its own,
 * incremented whatever the others do (`stop`: STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT), whose
 * result carries its count. One the local cache answered has nothing left. The other algorithms
 * count as tollgate does.
 */
export function referenceCounting(stop: boolean, nearRatio: number): CountingPolicy {
  return {
    add(counters, key, limit, cost, shadow, quota) {
      if (limit.algorithm !== 'fixed_window') {
        return addCounter(counters, key, limit, cost, shadow, quota);
      }
      const counter = newCounter(key, limit, cost, shadow, quota);
      counter.reference = { stop, held: false, cached: false };
      return counters.push(counter) - 1;
    },
    addGiveBack(counters, key, limit, cost) {
      const counter = giveBackCounter(key, limit, cost);
      // Counted in its place among the reference's counts, as the reference's refunds are.
      if (limit.algorithm === 'fixed_window')
        counter.reference = { stop, held: false, cached: false };
      return counters.push(counter) - 1;
    },
    remaining(limit, counter, result) {
      const reference = counter.reference;
      if (reference === undefined) return result.remaining;
      return reference.cached ? 0 : Math.max(0, limit.requestsPerUnit - result.remaining);
    },
    counts(limit, counter, result, hits, shadow) {
      const reference = counter.reference;
      if (reference === undefined) return undefined;
      const after = reference.cached ? undefined : result.remaining;
      return referenceCounts(limit.requestsPerUnit, after, hits, nearRatio, shadow);
    },
  };
}

/** Adds the descriptor to the counter of its key, or to a new one; returns the counter's slot. */
function addCounter(
  counters: CounterCheck[],
  key: string,
  limit: Limit,
  cost: number,
  shadow: boolean,
  quota: boolean,
): number {
  // A refund's counter is its own: a charge of the same key never joins it.
  let slot = 0;
  while (
    slot < counters.length &&
    ((counters[slot] as CounterCheck).key !== key || (counters[slot] as CounterCheck).giveBack)
  ) {
    slot++;
  }
  const counter = counters[slot];
  if (counter === undefined) {
    counters.push(newCounter(key, limit, cost, shadow, quota));
    return slot;
  }
  // Descriptors on one counter add up their costs; differing limits take the strictest, and an
  // enforced descriptor makes the counter enforced.
  counter.cost = Math.min(COST_CAP, counter.cost + cost);
  counter.limit = Math.min(counter.limit, limit.requestsPerUnit);
  counter.burst = Math.min(counter.burst, limit.burst);
  counter.shadow &&= shadow;
  counter.quota &&= quota;
  counter.overdraw ||= limit.overdraw;
  return slot;
}

/** A refund's counter: no role but giving back (an overdraw rule gives back as any other). */
function giveBackCounter(key: string, limit: Limit, cost: number): CounterCheck {
  const counter = newCounter(key, limit, cost, false, false);
  counter.giveBack = true;
  counter.overdraw = false;
  return counter;
}

/** A descriptor's counter, of the limit's algorithm, window (or calendar), limit and burst. */
export function newCounter(
  key: string,
  limit: Limit,
  cost: number,
  shadow: boolean,
  quota: boolean,
): CounterCheck {
  if (limit.calendar !== undefined) {
    return { ...plainCounter(key, limit, cost, shadow, quota), calendar: limit.calendar };
  }
  return plainCounter(key, limit, cost, shadow, quota);
}

function plainCounter(
  key: string,
  limit: Limit,
  cost: number,
  shadow: boolean,
  quota: boolean,
): CounterCheck {
  return {
    key,
    algorithm: limit.algorithm,
    windowMs: limit.windowMs,
    limit: limit.requestsPerUnit,
    burst: limit.burst,
    cost,
    shadow,
    quota,
    overdraw: limit.overdraw,
  };
}
