import fc from 'fast-check';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createMemoryStore } from '../../src/store/memoryStore.js';
import type { CounterCheck, Store } from '../../src/store/Store.js';
import { checkOf, counterSpec } from '../support/counterTraces.js';
import { CALL_PATHS, openPathStore, startRedis, type TestRedis } from '../support/redis.js';

// Random request traces on one injected clock, through the in-memory store and through Redis:
// every decision must be identical, since the TypeScript algorithms mirror the Lua ones, with
// every mix of shadow, quota, overdraw and reference-counted counters.

let redis: TestRedis;

beforeAll(async () => {
  redis = await startRedis();
});

afterAll(async () => {
  await redis?.stop();
});

const counter = counterSpec(
  [1_000, 7_000, 60_000, 3_600_000, 31_536_000_000],
  fc.oneof(fc.integer({ min: 0, max: 12 }), fc.constantFrom(1_000, 4_294_967_295)),
  { deep: true },
);
const step = fc.record({
  advanceMs: fc.oneof(fc.integer({ min: 0, max: 50 }), fc.integer({ min: 0, max: 90_000 })),
  counters: fc.uniqueArray(fc.integer({ min: 0, max: 3 }), { minLength: 1, maxLength: 3 }),
  cost: fc.oneof(
    fc.integer({ min: 0, max: 4 }),
    fc.constantFrom(2 ** 33, 2 ** 40 + 7, Number.MAX_SAFE_INTEGER),
  ),
  /** A second descriptor on the first counter, as reference counting sends them: unmerged. */
  twice: fc.option(fc.integer({ min: 0, max: 3 }), { freq: 3 }),
  /** A refund (is_negative_hits) of one of the counters, first or last in the request. */
  giveBack: fc.option(
    fc.record({
      counter: fc.integer({ min: 0, max: 3 }),
      cost: fc.oneof(fc.integer({ min: 0, max: 6 }), fc.constant(2 ** 40)),
      first: fc.boolean(),
    }),
    { freq: 3 },
  ),
});

describe.each(CALL_PATHS)('the in-memory store and Redis, calls as %s', (path) => {
  let store: Store;
  let batchingStore: Store;

  beforeAll(async () => {
    // The traces run on an injected clock, but Redis expires keys by its own: a TTL of a few ms
    // (a token bucket nearly full) could end between two steps that the trace puts at the same
    // instant. Kept a while longer, a counter is still there; an expired one decides as a kept
    // one would, so the slack changes no decision.
    const options = { clockSkewToleranceMs: 600_000 };
    store = await openPathStore(redis, path, options);
    batchingStore = await openPathStore(redis, path, { ...options, batchLimit: 7 });
  });

  afterAll(async () => {
    await store?.close();
    await batchingStore?.close();
  });

  it('give identical decisions on random traces, one by one and in batches', async () => {
    let run = 0;
    await fc.assert(
      fc.asyncProperty(
        fc.array(counter, { minLength: 4, maxLength: 4 }),
        fc.array(step, { minLength: 1, maxLength: 40 }),
        fc.integer({ min: 1_600_000_000_000, max: 1_900_000_000_000 }),
        async (specs, steps, start) => {
          run += 1;
          let now = start;
          const memory = createMemoryStore({ clock: () => now });
          try {
            const trace: { checks: CounterCheck[]; nowMs: number }[] = [];
            for (const { advanceMs, counters, cost, twice, giveBack } of steps) {
              now += advanceMs;
              const checks: CounterCheck[] = counters.map((i) =>
                checkOf(specs[i]!, `eq:{${path}${run}}:${i}`, cost),
              );
              const first = checks[0]!;
              if (twice !== null && first.reference) checks.push({ ...first, cost: twice });
              if (giveBack !== null) {
                const { counter: i, cost: back, first: atStart } = giveBack;
                const given = checkOf(specs[i]!, `eq:{${path}${run}}:${i}`, back);
                // As the plan makes it: a counter of its own, of no other role; under reference
                // counting, one of the reference's counts (held and cached mean nothing to it).
                const refund: CounterCheck = {
                  ...given,
                  shadow: false,
                  quota: false,
                  overdraw: false,
                  giveBack: true,
                };
                if (atStart) checks.unshift(refund);
                else checks.push(refund);
              }
              trace.push({ checks, nowMs: now });
            }
            // One after another through each store; and, all at once, through a store that sends
            // calls made together as batches, which must decide them in the order made.
            const inMemory = [];
            for (const { checks, nowMs } of trace)
              inMemory.push(await memory.decide(checks, nowMs));
            const inRedis = [];
            for (const { checks, nowMs } of trace) inRedis.push(await store.decide(checks, nowMs));
            expect(inRedis).toEqual(inMemory);
            const written = await redis.client.keys(`eq:{${path}${run}}:*`);
            if (written.length > 0) await redis.client.del(...written);
            const batched = await Promise.all(
              trace.map(({ checks, nowMs }) => batchingStore.decide(checks, nowMs)),
            );
            expect(batched).toEqual(inMemory);
          } finally {
            await memory.close();
          }
        },
      ),
      { numRuns: 300 },
    );
  }, 120_000);
});
