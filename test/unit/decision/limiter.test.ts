// The limiter runs plan, store and answer: what a caller and an observer get, with a cache in
// front of the store or without one.
import { describe, expect, it } from 'vitest';
import type { Decision } from '../../../src/core/check.js';
import { createLimiter, type LimiterOptions } from '../../../src/decision/limiter.js';
import type { CheckEvent } from '../../../src/decision/outcome.js';
import { withLocalCache, withOverLimitCache } from '../../../src/store/cachedStore.js';
import { createMemoryStore } from '../../../src/store/memoryStore.js';
import type { Store } from '../../../src/store/Store.js';
import { check, d, load } from './rules.js';

const rules = load();

function setup(cache: 'none' | 'overLimit' | 'local', options: Partial<LimiterOptions> = {}) {
  const clock = { now: Date.UTC(2030, 0, 1) + 10_000 };
  const memory = createMemoryStore({ clock: () => clock.now });
  let calls = 0;
  const counted: Store = {
    ...memory,
    decide: (counters, nowMs) => {
      calls += 1;
      return memory.decide(counters, nowMs);
    },
  };
  const cacheOptions = { size: 64, clock: () => clock.now, rules: () => rules };
  const store =
    cache === 'overLimit'
      ? withOverLimitCache(counted, cacheOptions)
      : cache === 'local'
        ? withLocalCache(counted, cacheOptions)
        : counted;
  const events: CheckEvent[] = [];
  const limiter = createLimiter({
    rules: () => rules,
    store,
    clock: () => clock.now,
    defaultAlgorithm: 'fixed_window',
    keyPrefix: '',
    failureMode: 'error',
    observe: (event) => events.push(event),
    ...options,
  });
  return { limiter, events, calls: () => calls };
}

const headers = (decision: Decision) =>
  Object.fromEntries((decision.headers ?? []).map((h) => [h.key, h.value]));

describe('the limiter', () => {
  it('tells observers a denial came from the cache, with no store time', async () => {
    const { limiter, events, calls } = setup('overLimit');
    const spent = check(d('tagged', 'x'));
    for (let i = 0; i < 4; i++) await limiter.decide(spent);
    expect(calls()).toBe(4);
    const cached = await limiter.decide(spent);
    expect(calls()).toBe(4);
    expect(cached.code).toBe('OVER_LIMIT');
    expect(events.at(-1)).toMatchObject({ overLimitCache: true, storeMs: 0 });
    expect(events.at(-2)?.overLimitCache).toBeUndefined();
    expect(events.at(-1)?.rules).toMatchObject([{ over: true, hits: 1 }]);
  });

  it('answers a domain without rules OK without a store call, and says so', async () => {
    const { limiter, events, calls } = setup('none');
    const decision = await limiter.decide({ ...check(d('route', '/a')), domain: 'other' });
    expect(decision).toEqual({ code: 'OK', statuses: [{ code: 'OK', limitRemaining: 0 }] });
    expect(calls()).toBe(0);
    expect(events[0]).toMatchObject({ unknownDomain: true, rules: [] });
  });

  it("COMPAT_MODE=reference: the local cache's answer is the store's, Retry-After included", async () => {
    const compat = { referenceCounting: { stop: false }, wholeSecondResets: true };
    const input = check(d('pool_a', 'x'), d('pool_b', 'x'), d('tagged', 'y'));
    const spend = async (limiter: ReturnType<typeof setup>['limiter']) => {
      for (let i = 0; i < 5; i++) await limiter.decide(input);
      return limiter.decide(input);
    };
    const decided = setup('none', compat);
    const cached = setup('local', compat);
    const fromStore = await spend(decided.limiter);
    const fromCache = await spend(cached.limiter);
    expect(cached.events.at(-1)?.overLimitCache).toBe(true);
    expect(fromStore.code).toBe('OVER_LIMIT');
    expect(fromCache).toEqual(fromStore);
    // The enforced limit frees up within the second; every quota is over for 50 s more.
    expect(headers(fromCache)['Retry-After']).toBe('50');
  });
});
