import {
  createKeyCache,
  createOverLimitCache,
  type KeyCache,
  type LocalCacheStats,
  type OverLimitCache,
} from './overLimitCache.js';
import type { CounterCheck, CounterResult, Store, StoreDecision } from './Store.js';
import { SINGLE_PROCESS, type Coherence } from './invalidation.js';

/**
 * The caches in front of a store, as stores themselves: the limiter calls `decide` as on any
 * store and cannot tell them apart, but for a decision's `fromCache`.
 *
 * Both learn under the rules object in force, read when they are called, and forget what they
 * learnt when it changes. Both read their clock before the store call: the reset the store
 * returns runs from a later moment, so a deadline taken from it is never late.
 */
export interface CacheOptions {
  /** How many counters it remembers at most. */
  size: number;
  /** The clock the store's resets are counted on. */
  clock: () => number;
  /** The rules in force: a new object empties the cache. */
  rules: () => object;
  /** Refunds of other processes (see invalidation.ts); none by default, as in memory. */
  coherence?: Coherence;
}

/**
 * OVER_LIMIT_CACHE_SIZE: a request whose every counter is remembered denied (see
 * overLimitCache.ts) is denied without a store call, as the store would deny it.
 */
export function withOverLimitCache(store: Store, options: CacheOptions): Store {
  const cache = createOverLimitCache(options.size);
  const { clock, rules, coherence = SINGLE_PROCESS } = options;
  coherence.onNotice((key) => (key === 'all' ? cache.clear() : cache.forget(key)));
  return delegate(store, (counters, nowMs) => {
    const version = rules();
    cache.sync(version);
    const now = clock();
    if (cache.size > 0 && coherence.live()) {
      const deadlines = cachedDenial(cache, counters, now);
      if (deadlines !== undefined) return Promise.resolve(denial(deadlines, now, false));
    }
    const generation = coherence.generation();
    return store.decide(counters, nowMs).then((decision) => {
      // A refund heard meanwhile may be later than what the store read.
      const fresh = generation === coherence.generation();
      for (let slot = 0; slot < counters.length; slot++) {
        const counter = counters[slot] as CounterCheck;
        const result = decision.results[slot];
        if (counter.giveBack) cache.forget(counter.key);
        else if (result !== undefined && fresh) cache.learn(version, counter, result, now);
      }
      return decision;
    });
  });
}

/** The reference's local cache, with the reference's gauges. */
export interface LocalCacheStore extends Store {
  localCacheStats(): LocalCacheStats;
}

/**
 * COMPAT_MODE=reference with a cache size: the reference's local cache. Each counter remembered
 * over is answered from memory and marked so that the store neither increments it nor lets it
 * fit; STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT then increments none of the others. The store is
 * called only when some counter is not remembered. Every counter is looked up, as the reference
 * looks each key up: its gauges count misses.
 */
export function withLocalCache(store: Store, options: CacheOptions): LocalCacheStore {
  const cache = createKeyCache(options.size);
  const { clock, rules, coherence = SINGLE_PROCESS } = options;
  coherence.onNotice((key) => (key === 'all' ? cache.clear() : cache.forget(key)));
  const decorated = delegate(store, (counters, nowMs) => {
    cache.sync(rules());
    const now = clock();
    const remembered = coherence.live() ? rememberedOver(cache, counters, now) : undefined;
    if (remembered !== undefined && remembered.every((deadline) => deadline !== undefined)) {
      // Denied unless every counter stands outside the gate.
      const gated = counters.some((counter) => !counter.shadow);
      return Promise.resolve(denial(remembered as number[], now, !gated));
    }
    const generation = coherence.generation();
    return store.decide(counters, nowMs).then((decision) => {
      const fresh = generation === coherence.generation();
      for (let slot = 0; slot < counters.length; slot++) {
        const counter = counters[slot] as CounterCheck;
        const result = decision.results[slot];
        if (counter.giveBack) {
          cache.forget(counter.key);
          continue;
        }
        if (result === undefined || counter.reference === undefined) continue;
        const deadline = remembered?.[slot];
        if (counter.reference.cached && deadline !== undefined) {
          decision.results[slot] = {
            fits: false,
            remaining: 0,
            resetMs: Math.ceil(deadline - now),
          };
        } else if (!result.fits && fresh) {
          // As the reference: any counter found over, shadow and quota ones included.
          cache.remember(counter.key, now + result.resetMs);
        }
      }
      return decision;
    });
  });
  return { ...decorated, localCacheStats: () => cache.stats() };
}

/** Every counter over, with 0 left until its deadline; nothing consumed. */
function denial(deadlines: readonly number[], now: number, allowed: boolean): StoreDecision {
  const results: CounterResult[] = deadlines.map((deadline) => ({
    fits: false,
    remaining: 0,
    resetMs: Math.ceil(deadline - now),
  }));
  return { allowed, results, fromCache: true };
}

/** A store that decides with `decide` and passes everything else to `store`. */
function delegate(store: Store, decide: Store['decide']): Store {
  return {
    decide,
    reset: (keys) => store.reset(keys),
    exists: (keys) => store.exists(keys),
    ping: () => store.ping(),
    probe: (nowMs) => store.probe(nowMs),
    close: () => store.close(),
  };
}

/**
 * The slots' deadlines when every counter of the request is remembered as denied a single unit,
 * so that each descriptor's true status is known without the store: OVER_LIMIT with 0 remaining
 * (one unit does not fit) until its deadline. Undefined when any counter must be decided: one
 * not remembered, a cost above 1 (its remaining and its reset may differ), a shadow, quota or
 * overdraw counter, which the store consumes or judges with the others, or a give-back, which the
 * store must apply whatever the others decide.
 */
function cachedDenial(
  cache: OverLimitCache,
  counters: readonly CounterCheck[],
  now: number,
): number[] | undefined {
  const deadlines: number[] = [];
  for (const counter of counters) {
    if (
      counter.shadow ||
      counter.overdraw ||
      counter.quota ||
      counter.giveBack ||
      counter.cost > 1
    ) {
      return undefined;
    }
    const deadline = cache.deniedUntil(counter, now);
    if (deadline === undefined) return undefined;
    deadlines.push(deadline);
  }
  return deadlines;
}

/**
 * Each reference counter's deadline while it is remembered over (undefined for the others), with
 * the counters marked as the store must see them. When some are remembered,
 * STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT increments none of the others. Undefined when none is
 * remembered.
 */
function rememberedOver(
  cache: KeyCache,
  counters: readonly CounterCheck[],
  now: number,
): (number | undefined)[] | undefined {
  let found = false;
  const deadlines = counters.map((counter) => {
    // A refund is applied whatever the cache says, as the reference's are.
    const deadline =
      counter.reference && !counter.giveBack ? cache.until(counter.key, now) : undefined;
    if (deadline !== undefined && counter.reference) {
      counter.reference.cached = true;
      found = true;
    }
    return deadline;
  });
  if (!found) return undefined;
  for (const counter of counters) if (counter.reference?.stop) counter.reference.held = true;
  return deadlines;
}
