import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import type { Algorithm } from '../../src/rules/types.js';
import { createMemoryStore } from '../../src/store/memoryStore.js';
import { NEVER, type CounterCheck } from '../../src/store/Store.js';
import { mulDiv, productDifference } from '../../src/store/algorithms.js';

// BRIEF: "Denied means the next attempt at that moment succeeds if nothing else consumed in
// between, and an attempt before it fails." Checked here on random traces, including windows of
// a year and limits near 2^32, where the products of the sliding window pass 2^53. The Redis
// store is held to the same decisions by test/integration/storeEquivalence.test.ts.

const spec = fc.record({
  algorithm: fc.constantFrom<Algorithm>('fixed_window', 'sliding_window', 'token_bucket'),
  windowMs: fc.constantFrom(1_000, 30_000, 60_000, 86_400_000, 31_536_000_000),
  limit: fc.oneof(fc.integer({ min: 1, max: 20 }), fc.constantFrom(999_983, 4_294_967_291)),
});

describe('a denied decision', () => {
  it('succeeds exactly at duration_until_reset and fails 1 ms before', async () => {
    const denials = { fixed_window: 0, sliding_window: 0, token_bucket: 0 };
    await fc.assert(
      fc.asyncProperty(
        spec,
        fc.array(fc.record({ advanceMs: fc.nat(120_000), cost: fc.integer({ min: 1, max: 8 }) }), {
          minLength: 1,
          maxLength: 30,
        }),
        fc.integer({ min: 1_600_000_000_000, max: 1_900_000_000_000 }),
        async ({ algorithm, windowMs, limit }, steps, start) => {
          let now = start;
          const store = createMemoryStore({ clock: () => now });
          const burst =
            algorithm === 'token_bucket' && limit * windowMs > 2 ** 52
              ? Math.min(limit, 1_000)
              : limit;
          const check = (cost: number): CounterCheck[] => [
            {
              key: 'k',
              algorithm,
              windowMs,
              limit,
              burst,
              cost: Math.min(cost, burst),
              shadow: false,
              quota: false,
              overdraw: false,
            },
          ];
          for (const { advanceMs, cost } of steps) {
            now += advanceMs;
            const decision = await store.decide(check(cost), now);
            const reset = decision.results[0]!.resetMs;
            if (decision.allowed || reset === NEVER) continue;
            expect(reset).toBeGreaterThan(0);
            denials[algorithm] += 1;
            const denied = await store.decide(check(cost), now + reset - 1);
            expect(denied.allowed, `1 ms before the reset of ${reset} ms`).toBe(false);
            const allowed = await store.decide(check(cost), now + reset);
            expect(allowed.allowed, `at the reset of ${reset} ms`).toBe(true);
            now += reset;
          }
          await store.close();
        },
      ),
      { numRuns: 400 },
    );
    // The property means something only if every algorithm was denied many times. The draws are
    // random: one run in several dozen saw only 40 denials of an algorithm, so the floor is 20.
    for (const count of Object.values(denials)) expect(count).toBeGreaterThan(20);
  });
});

describe('exact integer helpers', () => {
  const big = (n: number) => BigInt(n);
  it('productDifference has the sign of a*b - c*d beyond 2^53', () => {
    fc.assert(
      fc.property(
        fc.nat(2 ** 33 - 1),
        fc.nat(2 ** 36 - 1),
        fc.nat(2 ** 33 - 1),
        fc.nat(2 ** 36 - 1),
        (a, b, c, d) => {
          const exact = big(a) * big(b) - big(c) * big(d);
          const got = productDifference(a, b, c, d);
          expect(Math.sign(got)).toBe(exact === 0n ? 0 : exact > 0n ? 1 : -1);
        },
      ),
    );
  });
  it('mulDiv is exact floor division with remainder', () => {
    fc.assert(
      fc.property(
        fc.nat(2 ** 33 - 1),
        fc.nat(2 ** 35),
        fc.integer({ min: 1, max: 2 ** 33 - 1 }),
        (a, b, c) => {
          fc.pre((big(a) * big(b)) / big(c) < 2n ** 36n);
          const [q, r] = mulDiv(a, b, c);
          expect(big(q)).toBe((big(a) * big(b)) / big(c));
          expect(big(r)).toBe((big(a) * big(b)) % big(c));
        },
      ),
    );
  });
});
