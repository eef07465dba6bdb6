// The caches in front of the store, as stores: what reaches the real store behind them, and what
// the limiter gets back.
import { describe, expect, it } from 'vitest';
import { withLocalCache, withOverLimitCache } from '../../../src/store/cachedStore.js';
import { createMemoryStore } from '../../../src/store/memoryStore.js';
import type { CounterCheck, Store } from '../../../src/store/Store.js';

const START = Date.UTC(2030, 0, 1);

function counter(key: string, fields: Partial<CounterCheck> = {}): CounterCheck {
  return {
    key,
    algorithm: 'fixed_window',
    windowMs: 60_000,
    limit: 1,
    burst: 1,
    cost: 1,
    shadow: false,
    quota: false,
    overdraw: false,
    ...fields,
  };
}

function setup() {
  const clock = { now: START };
  const memory = createMemoryStore({ clock: () => clock.now });
  const seen: CounterCheck[][] = [];
  const backend: Store = {
    ...memory,
    decide: (counters, nowMs) => {
      seen.push(counters.map((c) => structuredClone(c)));
      return memory.decide(counters, nowMs);
    },
  };
  let rules = {};
  const options = { size: 16, clock: () => clock.now, rules: () => rules };
  return { clock, backend, seen, options, reload: () => (rules = {}) };
}

describe('the over-limit cache as a store', () => {
  it('denies a spent counter from memory until its reset, then asks the store again', async () => {
    const { clock, backend, seen, options } = setup();
    const store = withOverLimitCache(backend, options);
    expect((await store.decide([counter('a')], clock.now)).allowed).toBe(true);
    expect((await store.decide([counter('a')], clock.now)).allowed).toBe(false);
    clock.now += 10_000;
    const cached = await store.decide([counter('a')], clock.now);
    expect(cached).toEqual({
      allowed: false,
      results: [{ fits: false, remaining: 0, resetMs: 50_000 }],
      fromCache: true,
    });
    expect(seen).toHaveLength(2);
    clock.now += 50_000;
    expect((await store.decide([counter('a')], clock.now)).allowed).toBe(true);
    expect(seen).toHaveLength(3);
  });

  it('asks the store when any counter is not remembered, and forgets on a new rules object', async () => {
    const { clock, backend, seen, options, reload } = setup();
    const store = withOverLimitCache(backend, options);
    await store.decide([counter('a')], clock.now);
    await store.decide([counter('a')], clock.now);
    await store.decide([counter('a'), counter('b')], clock.now);
    expect(seen).toHaveLength(3);
    reload();
    await store.decide([counter('a')], clock.now);
    expect(seen).toHaveLength(4);
  });

  it('passes the rest of the store through', async () => {
    const { clock, backend, options } = setup();
    const store = withOverLimitCache(backend, options);
    await store.decide([counter('a')], clock.now);
    expect(await store.exists(['a', 'b'])).toBe(1);
    expect(await store.reset(['a'])).toBe(1);
    await expect(store.ping()).resolves.toBeUndefined();
  });
});

describe("the reference's local cache as a store", () => {
  const reference = (key: string, stop = true) =>
    counter(key, { reference: { stop, held: false, cached: false } });

  it('marks a remembered counter for the store, holds the others, and answers its reset', async () => {
    const { clock, backend, seen, options } = setup();
    const store = withLocalCache(backend, options);
    await store.decide([reference('a')], clock.now);
    expect((await store.decide([reference('a')], clock.now)).allowed).toBe(false);
    clock.now += 20_000;
    const mixed = await store.decide([reference('a'), reference('b')], clock.now);
    // The store saw `a` as remembered over, and `b` held (STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT).
    expect(seen[2]?.map((c) => c.reference)).toEqual([
      { stop: true, held: true, cached: true },
      { stop: true, held: true, cached: false },
    ]);
    expect(mixed.results[0]).toEqual({ fits: false, remaining: 0, resetMs: 40_000 });
    expect(mixed.fromCache).toBeUndefined();
  });

  it('answers from memory when every counter is remembered, and counts as the reference does', async () => {
    const { clock, backend, seen, options } = setup();
    const store = withLocalCache(backend, options);
    await store.decide([reference('a')], clock.now);
    await store.decide([reference('a')], clock.now);
    const cached = await store.decide([reference('a')], clock.now);
    expect(cached.fromCache).toBe(true);
    expect(cached.allowed).toBe(false);
    expect(seen).toHaveLength(2);
    expect(store.localCacheStats()).toMatchObject({
      hitCount: 1,
      missCount: 2,
      lookupCount: 3,
      entryCount: 1,
    });
  });

  it('lets a request through from memory when every remembered counter is outside the gate', async () => {
    const { clock, backend, options } = setup();
    const store = withLocalCache(backend, options);
    const shadow = () =>
      counter('s', { shadow: true, reference: { stop: false, held: false, cached: false } });
    await store.decide([shadow()], clock.now);
    await store.decide([shadow()], clock.now);
    const cached = await store.decide([shadow()], clock.now);
    expect(cached).toMatchObject({ allowed: true, fromCache: true });
  });
});
