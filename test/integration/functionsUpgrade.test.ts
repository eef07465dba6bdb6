import fc from 'fast-check';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createMemoryStore } from '../../src/store/memoryStore.js';
import type { BatchedDecide } from '../../src/store/script.js';
import type { CounterCheck, Store, StoreDecision } from '../../src/store/Store.js';
import { checkOf, counterSpec, type CounterSpec } from '../support/counterTraces.js';
import { previousInstance, type PreviousInstance } from '../support/previousRelease.js';
import { CALL_PATHS, openPathStore, startRedis, type TestRedis } from '../support/redis.js';

// An upgrade from the release before Redis Functions, on a real Redis. Counters that release's
// scripts wrote (test/fixtures/previous-lua) continue exactly under today's store, whichever way
// its calls go; and while old and new instances run at once, on one counter, exactly the limit is
// admitted and neither refuses the other's counter as foreign.

let redis: TestRedis;

beforeAll(async () => {
  redis = await startRedis();
});

afterAll(async () => {
  await redis?.stop();
});

// Counters are kept this much longer than their windows: the traces run on an injected clock,
// and Redis expires keys by its own (see storeEquivalence.test.ts).
const SKEW_MS = 600_000;

// Without overdraw, whose charges past the limit the previous release saturated and this one
// records in full: its counters still continue, but the two releases' own decisions differ.
const counter = counterSpec([1_000, 7_000, 60_000, 3_600_000], fc.integer({ min: 0, max: 12 }), {
  overdraw: false,
});
const step = fc.record({
  advanceMs: fc.oneof(fc.integer({ min: 0, max: 50 }), fc.integer({ min: 0, max: 30_000 })),
  counters: fc.uniqueArray(fc.integer({ min: 0, max: 3 }), { minLength: 1, maxLength: 3 }),
  cost: fc.integer({ min: 0, max: 4 }),
});

describe.each(CALL_PATHS)('an upgrade, then calls as %s', (path) => {
  let store: Store;
  let previous: PreviousInstance;

  beforeAll(async () => {
    store = await openPathStore(redis, path, { clockSkewToleranceMs: SKEW_MS });
    previous = previousInstance(redis, SKEW_MS);
  });

  afterAll(async () => {
    previous?.close();
    await store?.close();
  });

  it('keeps every count: counters the previous release wrote continue exactly', async () => {
    // How often a counter of each kind was decided by the old scripts and then by the new store.
    const continued: Record<string, number> = {};
    let run = 0;
    await fc.assert(
      fc.asyncProperty(
        fc.array(counter, { minLength: 4, maxLength: 4 }),
        fc.array(step, { minLength: 2, maxLength: 30 }),
        fc.integer({ min: 1, max: 29 }),
        fc.integer({ min: 1_600_000_000_000, max: 1_900_000_000_000 }),
        async (specs, steps, upgradeAt, start) => {
          run += 1;
          let now = start;
          const memory = createMemoryStore({ clock: () => now });
          const byOld = new Set<number>();
          try {
            for (const [n, { advanceMs, counters, cost }] of steps.entries()) {
              now += advanceMs;
              const checks = counters.map((i) =>
                checkOf(specs[i] as CounterSpec, `up:{${path}${run}}:${i}`, cost),
              );
              const upgraded = n >= upgradeAt;
              const decider = upgraded ? store : previous;
              const expected = await memory.decide(checks, now);
              expect(await decider.decide(checks, now)).toEqual(expected);
              for (const i of counters) {
                if (!upgraded) byOld.add(i);
                else if (byOld.delete(i)) {
                  const spec = specs[i] as CounterSpec;
                  const kind =
                    spec.reference && spec.algorithm === 'fixed_window'
                      ? 'reference'
                      : spec.algorithm;
                  continued[kind] = (continued[kind] ?? 0) + 1;
                }
              }
            }
          } finally {
            await memory.close();
          }
        },
      ),
      { numRuns: 120 },
    );
    // The traces did upgrade counters of every kind. How many is random (one run had exactly 10
    // of the reference's counting, the rarest kind): a few is what this asks.
    for (const kind of ['fixed_window', 'sliding_window', 'token_bucket', 'reference']) {
      expect(continued[kind] ?? 0, kind).toBeGreaterThan(2);
    }
  }, 120_000);
});

describe('old and new instances at once, on one counter', () => {
  const LIMIT = 100;
  const CHECKS = 400;
  const NOW = 1_700_000_000_000;
  let single: Store;
  let batching: Store;
  let previous: PreviousInstance;

  beforeAll(async () => {
    single = await openPathStore(redis, 'functions');
    batching = await openPathStore(redis, 'functions', { batchLimit: 7 });
    previous = previousInstance(redis);
  });

  afterAll(async () => {
    previous?.close();
    await single?.close();
    await batching?.close();
  });

  const kinds: [string, Partial<CounterCheck>][] = [
    ['a fixed window (the plain script)', { algorithm: 'fixed_window' }],
    [
      'a fixed window counted as the reference counts (the decision script)',
      { algorithm: 'fixed_window', reference: { stop: true, held: false, cached: false } },
    ],
    ['a sliding window', { algorithm: 'sliding_window' }],
    ['a token bucket', { algorithm: 'token_bucket' }],
  ];

  describe.each([
    ['one call per check', 1],
    ['in batches of 7', 7],
  ])('%s', (_, batch) => {
    it.each(kinds)(`%s: exactly ${LIMIT} of ${CHECKS} admitted, none refused`, async (k, kind) => {
      const check: CounterCheck = {
        key: `both:{${batch}:${k}}`,
        algorithm: 'fixed_window',
        windowMs: 3_600_000,
        limit: LIMIT,
        burst: LIMIT,
        cost: 1,
        shadow: false,
        quota: false,
        overdraw: false,
        ...kind,
      };
      const store = batch === 1 ? single : batching;
      // Rounds of 40 at once, half from each: the first rounds fit, so both kinds of instance
      // admit; one round crosses the limit; the rest are refused.
      const admitted = { old: 0, new: 0 };
      const failures: string[] = [];
      for (let round = 0; round < CHECKS / 40; round++) {
        const calls: Promise<void>[] = [];
        const count = (kind: 'old' | 'new', decided: StoreDecision | Error) => {
          if (decided instanceof Error) failures.push(decided.message);
          else if (decided.allowed) admitted[kind] += 1;
        };
        const failed = (error: unknown) => void failures.push(String(error));
        let waiting: BatchedDecide[] = [];
        const sendOld = () => {
          const requests = waiting;
          waiting = [];
          calls.push(
            (batch === 1
              ? previous.decide([check], NOW).then((one) => [one])
              : previous.decideBatch(requests)
            ).then((all) => all.forEach((one) => count('old', one)), failed),
          );
        };
        for (let i = 0; i < 40; i++) {
          if (i % 2 === 1) {
            calls.push(store.decide([check], NOW).then((one) => count('new', one), failed));
            continue;
          }
          waiting.push({ checks: [check], nowMs: NOW });
          if (waiting.length === batch) sendOld();
        }
        if (waiting.length > 0) sendOld();
        await Promise.all(calls);
      }
      expect(failures).toEqual([]);
      expect(admitted.old + admitted.new).toBe(LIMIT);
      expect(admitted.old).toBeGreaterThanOrEqual(40);
      expect(admitted.new).toBeGreaterThanOrEqual(40);
    });
  });
});
