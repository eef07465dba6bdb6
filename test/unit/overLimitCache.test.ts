// The over-limit cache: which denials it remembers and for how long, its bound and its flush on
// reload; then the limiter with it, and a property: replayed on one injected clock, a limiter with
// the cache never denies what one without it allows, and otherwise decides identically.
import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import type { Check, Decision, Descriptor, OverrideUnit } from '../../src/core/check.js';
import { createLimiter, type Limiter } from '../../src/decision/limiter.js';
import type { CheckEvent } from '../../src/decision/outcome.js';
import { createOverLimitCache } from '../../src/store/overLimitCache.js';
import { loadRules } from '../../src/rules/loadRules.js';
import type { RuleSet } from '../../src/rules/types.js';
import { withOverLimitCache } from '../../src/store/cachedStore.js';
import { createMemoryStore } from '../../src/store/memoryStore.js';
import { NEVER, type CounterCheck, type CounterResult, type Store } from '../../src/store/Store.js';

function counter(fields: Partial<CounterCheck> = {}): CounterCheck {
  return {
    key: 'k',
    algorithm: 'fixed_window',
    windowMs: 60_000,
    limit: 5,
    burst: 5,
    cost: 1,
    shadow: false,
    quota: false,
    overdraw: false,
    ...fields,
  };
}
const denied = (resetMs: number): CounterResult => ({ fits: false, remaining: 0, resetMs });
const fits: CounterResult = { fits: true, remaining: 0, resetMs: 1_000 };

function writeRules(yaml: string): string {
  const path = join(mkdtempSync(join(tmpdir(), 'tollgate-cache-')), 'rules.yaml');
  writeFileSync(path, yaml);
  return path;
}
const load = (yaml: string): RuleSet =>
  loadRules(writeRules(yaml), { defaultAlgorithm: 'sliding_window' });

describe('the over-limit cache', () => {
  const rules = {};

  it('denies the smallest denied cost and anything larger up to the limit, nothing smaller', () => {
    const cache = createOverLimitCache(10);
    cache.sync(rules);
    cache.learn(rules, counter({ cost: 3 }), denied(1_000), 0);
    expect(cache.deniedUntil(counter({ cost: 2 }), 10)).toBeUndefined();
    expect(cache.deniedUntil(counter({ cost: 3 }), 10)).toBe(1_000);
    expect(cache.deniedUntil(counter({ cost: 5 }), 10)).toBe(1_000);
    // Past the limit a cost never fits, which the store answers with no reset at all.
    expect(cache.deniedUntil(counter({ cost: 9 }), 10)).toBeUndefined();
    // A larger cost denied later adds nothing: the smaller one already covers it.
    cache.learn(rules, counter({ cost: 4 }), denied(5_000), 20);
    expect(cache.deniedUntil(counter({ cost: 4 }), 1_500)).toBeUndefined();
    // A smaller cost replaces the entry with its own deadline, even a sooner one.
    cache.learn(rules, counter({ cost: 3 }), denied(1_000), 30);
    cache.learn(rules, counter({ cost: 1 }), denied(400), 40);
    expect(cache.deniedUntil(counter({ cost: 1 }), 50)).toBe(440);
    expect(cache.deniedUntil(counter({ cost: 3 }), 500)).toBeUndefined();
    // The same cost denied again keeps the later deadline.
    cache.learn(rules, counter({ cost: 1 }), denied(700), 600);
    cache.learn(rules, counter({ cost: 1 }), denied(100), 610);
    expect(cache.deniedUntil(counter({ cost: 1 }), 1_000)).toBe(1_300);
  });

  it('counts a check-only cost of 0 as 1', () => {
    const cache = createOverLimitCache(10);
    cache.sync(rules);
    cache.learn(rules, counter({ cost: 0 }), denied(1_000), 0);
    expect(cache.deniedUntil(counter({ cost: 1 }), 0)).toBe(1_000);
    expect(cache.deniedUntil(counter({ cost: 0 }), 0)).toBe(1_000);
  });

  it('expires an entry at its deadline', () => {
    const cache = createOverLimitCache(10);
    cache.sync(rules);
    cache.learn(rules, counter(), denied(1_000), 5_000);
    expect(cache.deniedUntil(counter(), 5_999)).toBe(6_000);
    expect(cache.deniedUntil(counter(), 6_000)).toBeUndefined();
    expect(cache.size).toBe(0);
  });

  it('holds at most its size, dropping the least recently used', () => {
    const cache = createOverLimitCache(3);
    cache.sync(rules);
    for (const key of ['a', 'b', 'c']) cache.learn(rules, counter({ key }), denied(1_000), 0);
    expect(cache.deniedUntil(counter({ key: 'a' }), 1)).toBe(1_000);
    cache.learn(rules, counter({ key: 'd' }), denied(1_000), 2);
    expect(cache.size).toBe(3);
    expect(cache.deniedUntil(counter({ key: 'b' }), 3)).toBeUndefined();
    for (const key of ['a', 'c', 'd']) {
      expect(cache.deniedUntil(counter({ key }), 3)).toBeGreaterThan(3);
    }
  });

  it('empties on new rules, and ignores what was learnt under the old ones', () => {
    const cache = createOverLimitCache(10);
    const before = {};
    const after = {};
    cache.sync(before);
    cache.learn(before, counter(), denied(1_000), 0);
    cache.sync(before);
    expect(cache.size).toBe(1);
    cache.sync(after);
    expect(cache.size).toBe(0);
    // A store call that began under the old rules and ends after the reload.
    cache.learn(before, counter(), denied(1_000), 0);
    expect(cache.deniedUntil(counter(), 1)).toBeUndefined();
  });

  it('remembers enforced window counters with a finite reset only', () => {
    const cache = createOverLimitCache(10);
    cache.sync(rules);
    const kept = [
      counter({ key: 'fixed' }),
      counter({ key: 'sliding', algorithm: 'sliding_window' }),
    ];
    const dropped = [
      counter({ key: 'shadow', shadow: true }),
      counter({ key: 'quota', quota: true }),
      counter({ key: 'overdraw', overdraw: true }),
      // A bucket refills at the rate of whoever reads it: an override or a reload may free it.
      counter({ key: 'bucket', algorithm: 'token_bucket' }),
    ];
    for (const c of [...kept, ...dropped]) cache.learn(rules, c, denied(1_000), 0);
    cache.learn(rules, counter({ key: 'never' }), denied(NEVER), 0);
    cache.learn(rules, counter({ key: 'fits' }), fits, 0);
    expect(cache.size).toBe(kept.length);
    for (const c of kept) expect(cache.deniedUntil(c, 1)).toBe(1_000);
  });

  it('speaks only for a limit no higher than the one denied', () => {
    const cache = createOverLimitCache(10);
    cache.sync(rules);
    cache.learn(rules, counter({ limit: 5, burst: 5 }), denied(1_000), 0);
    expect(cache.deniedUntil(counter({ limit: 3, burst: 3 }), 1)).toBe(1_000);
    expect(cache.deniedUntil(counter({ limit: 8, burst: 8 }), 1)).toBeUndefined();
  });

  it('forgets an entry when the store lets its cost through (a counter reset behind its back)', () => {
    const cache = createOverLimitCache(10);
    cache.sync(rules);
    cache.learn(rules, counter({ cost: 2 }), denied(1_000), 0);
    cache.learn(rules, counter({ cost: 1 }), fits, 10);
    expect(cache.size).toBe(1);
    cache.learn(rules, counter({ cost: 2 }), fits, 20);
    expect(cache.size).toBe(0);
  });
});

/** A store that counts its calls. */
function counting(store: Store): Store & { calls: number } {
  const counted = {
    ...store,
    calls: 0,
    decide: (checks: readonly CounterCheck[], nowMs: number | undefined) => {
      counted.calls += 1;
      return store.decide(checks, nowMs);
    },
  };
  return counted;
}

const d = (...keysAndValues: string[]): Descriptor => {
  const entries = [];
  for (let i = 0; i < keysAndValues.length; i += 2) {
    entries.push({ key: keysAndValues[i] ?? '', value: keysAndValues[i + 1] ?? '' });
  }
  return { entries };
};

describe('the limiter with the over-limit cache', () => {
  const RULES = `
domain: api
descriptors:
  - key: tenant
    rate_limit: {name: tenant, unit: hour, requests_per_unit: 100, algorithm: fixed_window}
    descriptors:
      - key: route
        rate_limit: {name: route, unit: minute, requests_per_unit: 2, algorithm: fixed_window}
`;
  function setup(cacheSize = 100) {
    const clock = { now: Date.UTC(2030, 0, 1) + 15_000 };
    const store = counting(createMemoryStore({ clock: () => clock.now }));
    let rules = load(RULES);
    const events: CheckEvent[] = [];
    const limiter = createLimiter({
      rules: () => rules,
      store:
        cacheSize > 0
          ? withOverLimitCache(store, {
              size: cacheSize,
              clock: () => clock.now,
              rules: () => rules,
            })
          : store,
      clock: () => clock.now,
      defaultAlgorithm: 'sliding_window',
      keyPrefix: '',
      failureMode: 'error',
      observe: (event) => events.push(event),
    });
    // The route alone: once it is spent, every limited descriptor of the check is over.
    const check: Check = {
      domain: 'api',
      descriptors: [d('tenant', 'acme', 'route', '/orders')],
      hitsAddend: 0,
    };
    const reload = () => (rules = load(RULES));
    return { clock, store, limiter, check, events, reload };
  }

  it('answers a spent counter from memory until its reset, then asks the store again', async () => {
    const { clock, store, limiter, check, events } = setup();
    for (let i = 0; i < 3; i++) await limiter.decide(check);
    expect(store.calls).toBe(3);
    clock.now += 5_000;
    const cached = await limiter.decide(check);
    expect(store.calls).toBe(3);
    expect(cached).toEqual({
      code: 'OVER_LIMIT',
      statuses: [
        {
          code: 'OVER_LIMIT',
          currentLimit: { requestsPerUnit: 2, unit: 'minute', name: 'route' },
          limitRemaining: 0,
          durationUntilResetMs: 40_000,
        },
      ],
      headers: [
        { key: 'RateLimit-Policy', value: '"route";q=2;w=60' },
        { key: 'RateLimit', value: '"route";r=0;t=40' },
        { key: 'Retry-After', value: '40' },
      ],
    });
    expect(events.at(-1)).toMatchObject({ overLimitCache: true, storeMs: 0 });
    expect(events.at(-1)?.rules).toMatchObject([{ over: true, hits: 1 }]);

    clock.now += 39_999;
    expect((await limiter.decide(check)).code).toBe('OVER_LIMIT');
    expect(store.calls).toBe(3);
    clock.now += 1;
    const fresh = await limiter.decide(check);
    expect(fresh.code).toBe('OK');
    expect(store.calls).toBe(4);
    // Nothing was consumed while the cache answered: a new minute, one of two spent.
    expect(fresh.statuses[0]?.limitRemaining).toBe(1);
  });

  it('asks the store whenever a limited descriptor of the check is not remembered over', async () => {
    const { store, limiter, check } = setup();
    for (let i = 0; i < 4; i++) await limiter.decide(check);
    expect(store.calls).toBe(3);
    // The tenant beside the spent route: only the store can say what the tenant has left.
    const both = { ...check, descriptors: [d('tenant', 'acme'), ...check.descriptors] };
    const decided = await limiter.decide(both);
    expect(store.calls).toBe(4);
    expect(decided.code).toBe('OVER_LIMIT');
    expect(decided.statuses.map((status) => [status.code, status.limitRemaining])).toEqual([
      ['OK', 100],
      ['OVER_LIMIT', 0],
    ]);
  });

  it('asks the store for a smaller cost than the one denied', async () => {
    const { store, limiter, check } = setup();
    const costing = async (hitsAddend: number) =>
      (await limiter.decide({ ...check, hitsAddend })).code;
    // The route allows 2 a minute. A cost above 1 always goes to the store: what it leaves, and
    // when it fits, depend on the cost.
    expect(await costing(1)).toBe('OK');
    expect(await costing(2)).toBe('OVER_LIMIT');
    expect(store.calls).toBe(2);
    expect(await costing(2)).toBe('OVER_LIMIT');
    expect(store.calls).toBe(3);
    expect(await costing(1)).toBe('OK');
    expect(store.calls).toBe(4);
    expect(await costing(1)).toBe('OVER_LIMIT');
    expect(store.calls).toBe(5);
    expect(await costing(1)).toBe('OVER_LIMIT');
    expect(store.calls).toBe(5);
  });

  it('forgets everything when the rules are reloaded', async () => {
    const { store, limiter, check, reload } = setup();
    for (let i = 0; i < 4; i++) await limiter.decide(check);
    expect(store.calls).toBe(3);
    reload();
    await limiter.decide(check);
    expect(store.calls).toBe(4);
  });

  it('calls the store every time with OVER_LIMIT_CACHE_SIZE=0', async () => {
    const { store, limiter, check } = setup(0);
    for (let i = 0; i < 6; i++) await limiter.decide(check);
    expect(store.calls).toBe(6);
  });
});

// The property. Rules over every algorithm and flag; requests that mix them, with limit overrides
// (also on a bucket's counter, at any rate), request and descriptor costs (check-only 0 and costs
// that never fit), clock steps and reloads.
const RULES_A = `
domain: p
descriptors:
  - key: fw
    rate_limit: {unit: minute, requests_per_unit: 4, algorithm: fixed_window}
  - key: sw
    rate_limit: {window: 10s, requests_per_unit: 3, algorithm: sliding_window}
  - key: tb
    rate_limit: {window: 30s, requests_per_unit: 3, algorithm: token_bucket, burst: 4}
  - key: tm
    rate_limit: {unit: minute, requests_per_unit: 2, algorithm: token_bucket, burst: 3}
  - key: sh
    shadow_mode: true
    rate_limit: {unit: second, requests_per_unit: 1, algorithm: fixed_window}
  - key: qa
    quota_mode: true
    rate_limit: {unit: minute, requests_per_unit: 2, algorithm: sliding_window}
  - key: qb
    quota_mode: true
    rate_limit: {unit: second, requests_per_unit: 1, algorithm: token_bucket}
  - key: od
    rate_limit: {unit: minute, requests_per_unit: 3, algorithm: fixed_window, overdraw: true}
`;
// A reload changes limits, rates and a window.
const RULES_B = RULES_A.replace(
  'requests_per_unit: 4, algorithm: fixed_window',
  'requests_per_unit: 6, algorithm: fixed_window',
)
  .replace('{window: 30s, requests_per_unit: 3', '{window: 30s, requests_per_unit: 9')
  .replace('{window: 10s,', '{window: 20s,');
const KEYS = ['fw', 'sw', 'tb', 'tm', 'sh', 'qa', 'qb', 'od'] as const;

/** `arbitrary` once in `every` draws, undefined otherwise. */
const sometimes = <T>(every: number, arbitrary: fc.Arbitrary<T>) =>
  fc.oneof({ weight: every - 1, arbitrary: fc.constant(undefined) }, { weight: 1, arbitrary });
const descriptorArb = fc.record({
  key: fc.constantFrom(...KEYS, 'fw', 'sw', 'tb', 'fw', 'sw', 'tb'),
  value: fc.constantFrom('a', 'b'),
  hits: sometimes(
    3,
    fc.oneof(
      { weight: 9, arbitrary: fc.integer({ min: 0, max: 5 }) },
      { weight: 1, arbitrary: fc.constant(2 ** 40) },
    ),
  ),
  override: sometimes(
    8,
    fc.record({
      requestsPerUnit: fc.integer({ min: 0, max: 12 }),
      unit: fc.constantFrom<OverrideUnit>('second', 'minute'),
    }),
  ),
});
const stepArb = fc.record({
  advanceMs: fc.oneof(
    { weight: 6, arbitrary: fc.integer({ min: 0, max: 40 }) },
    { weight: 3, arbitrary: fc.integer({ min: 0, max: 3_000 }) },
    { weight: 1, arbitrary: fc.integer({ min: 0, max: 70_000 }) },
  ),
  descriptors: fc.array(descriptorArb, { minLength: 1, maxLength: 3 }),
  hitsAddend: fc.constantFrom(0, 0, 1, 2, 3),
  reload: fc.integer({ min: 0, max: 49 }).map((n) => n === 0),
});

type Step = typeof stepArb extends fc.Arbitrary<infer T> ? T : never;

/**
 * Replays a trace through a limiter with the cache and one without, each over its own in-memory
 * store, on one clock; resolves with how many checks the cache answered.
 */
async function replay(steps: readonly Step[], start: number): Promise<number> {
  const versions = [load(RULES_A), load(RULES_B)];
  let now = start;
  let version = 0;
  let rules = versions[0] as RuleSet;
  let fromCache = false;
  let hits = 0;
  const make = (cacheSize: number): [Limiter, Store] => {
    const store = createMemoryStore({ clock: () => now });
    const limiter = createLimiter({
      rules: () => rules,
      store:
        cacheSize > 0
          ? withOverLimitCache(store, { size: cacheSize, clock: () => now, rules: () => rules })
          : store,
      clock: () => now,
      defaultAlgorithm: 'sliding_window',
      keyPrefix: '',
      failureMode: 'error',
      observe: (event) => {
        if (cacheSize > 0) fromCache = event.overLimitCache === true;
      },
    });
    return [limiter, store];
  };
  const [cached, cachedStore] = make(8);
  const [plain, plainStore] = make(0);
  try {
    for (const step of steps) {
      now += step.advanceMs;
      if (step.reload) {
        // A reload swaps in a new object with other limits; the cache must empty.
        version = 1 - version;
        rules = { domains: (versions[version] as RuleSet).domains };
      }
      const check: Check = {
        domain: 'p',
        hitsAddend: step.hitsAddend,
        descriptors: step.descriptors.map(({ key, value, hits, override }) => ({
          entries: [{ key, value }],
          ...(hits === undefined ? {} : { hitsAddend: BigInt(hits) }),
          ...(override === undefined ? {} : { limit: override }),
        })),
      };
      const withCache = await cached.decide(check);
      const without = await plain.decide(check);
      if (fromCache) {
        hits += 1;
        expectDenialCovered(withCache, without);
      } else {
        expect(withCache).toEqual(without);
      }
    }
  } finally {
    await cachedStore.close();
    await plainStore.close();
  }
  return hits;
}

describe('a limiter with the cache and one without, on one clock', () => {
  it('never deny what the store allows, and otherwise decide identically', async () => {
    let cacheHits = 0;
    await fc.assert(
      fc.asyncProperty(
        fc.array(stepArb, { minLength: 1, maxLength: 80, size: 'max' }),
        fc.integer({ min: 1_800_000_000_000, max: 1_900_000_000_000 }),
        async (steps, start) => {
          cacheHits += await replay(steps, start);
        },
      ),
      { numRuns: 400 },
    );
    // The cache answers only when every counter of a check is spent: rarer, but it must happen.
    // The draws are random: one run of 400 saw exactly 20 answers from the cache.
    expect(cacheHits).toBeGreaterThan(5);
  }, 120_000);
});

/**
 * The store denied too, and every descriptor says what the store said: the same code, limit and
 * remaining, and a reset no later (the cache's runs from before the store's call).
 */
function expectDenialCovered(withCache: Decision, without: Decision): void {
  expect(without.code).toBe('OVER_LIMIT');
  withCache.statuses.forEach((status, i) => {
    const truth = without.statuses[i];
    const { durationUntilResetMs: early, ...rest } = status;
    const { durationUntilResetMs: late, ...truthRest } = truth ?? { code: 'OK', limitRemaining: 0 };
    expect(rest).toEqual(truthRest);
    if (early === undefined) expect(late).toBeUndefined();
    else expect(late).toBeGreaterThanOrEqual(early);
  });
  const retryAfter = (decision: Decision) =>
    decision.headers?.find((header) => header.key === 'Retry-After')?.value;
  const [early, truth] = [retryAfter(withCache), retryAfter(without)];
  if (early !== undefined && truth !== undefined)
    expect(Number(early)).toBeLessThanOrEqual(Number(truth));
}
