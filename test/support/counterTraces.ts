import fc from 'fast-check';
import type { Algorithm } from '../../src/rules/types.js';
import type { CounterCheck } from '../../src/store/Store.js';

/**
 * Random counters for traces that two stores (or two releases) decide alike: every algorithm,
 * with every mix of shadow, quota, overdraw and, for fixed windows, the reference's counting.
 */
export function counterSpec(
  windowsMs: readonly number[],
  limit: fc.Arbitrary<number>,
  { overdraw = true, deep = false }: { overdraw?: boolean; deep?: boolean } = {},
) {
  return fc.record({
    algorithm: fc.constantFrom<Algorithm>('fixed_window', 'sliding_window', 'token_bucket'),
    windowMs: fc.constantFrom(...windowsMs),
    limit,
    extraBurst: fc.integer({ min: 0, max: 5 }),
    shadow: fc.boolean(),
    quota: fc.boolean(),
    overdraw: overdraw ? fc.boolean() : fc.constant(false),
    // An overdraw's deeper debt (CounterCheck.deepDebt), for stores of this release alike.
    deep: deep ? fc.boolean() : fc.constant(false),
    // COMPAT_MODE=reference's counting, for fixed windows.
    reference: fc.option(
      fc.record({ stop: fc.boolean(), held: fc.boolean(), cached: fc.boolean() }),
      { freq: 2 },
    ),
  });
}

export type CounterSpec = ReturnType<typeof counterSpec> extends fc.Arbitrary<infer T> ? T : never;

/** The check of one spec's counter at `key`. */
export function checkOf(spec: CounterSpec, key: string, cost: number): CounterCheck {
  // A token bucket with a rate refills, so it has a burst; a bucket of rate 0 has none. A burst
  // whose product with the window passes 2^52 is left out, as the store's bounds leave it.
  const burst =
    spec.algorithm === 'token_bucket' && spec.limit > 0 ? spec.limit + spec.extraBurst : spec.limit;
  return {
    key,
    algorithm: spec.algorithm,
    windowMs: spec.windowMs,
    limit: spec.limit,
    burst:
      spec.algorithm === 'token_bucket' && burst * spec.windowMs > 2 ** 52 ? spec.limit : burst,
    cost,
    shadow: spec.shadow,
    quota: spec.quota,
    overdraw: spec.overdraw,
    ...(spec.deep ? { deepDebt: true } : {}),
    ...(spec.reference && spec.algorithm === 'fixed_window'
      ? { reference: { ...spec.reference } }
      : {}),
  };
}
