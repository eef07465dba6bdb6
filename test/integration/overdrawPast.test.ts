import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Algorithm } from '../../src/rules/types.js';
import { createMemoryStore } from '../../src/store/memoryStore.js';
import type { CounterCheck, Store } from '../../src/store/Store.js';
import { CALL_PATHS, openPathStore, startRedis, type TestRedis } from '../support/redis.js';

// An overdraw lands in full, past the limit, and its result says how far past: what an RLQS
// charge counts as over-admitted, on every instance alike. The same on Redis (both call paths)
// and in memory.

let redis: TestRedis;

beforeAll(async () => {
  redis = await startRedis();
});

afterAll(async () => {
  await redis?.stop();
});

const NOW = 1_800_000_000_000;

function overdraw(algorithm: Algorithm, key: string, cost: number): CounterCheck {
  return {
    key,
    algorithm,
    windowMs: 60_000,
    limit: 10,
    burst: 10,
    cost,
    shadow: false,
    quota: false,
    overdraw: true,
  };
}

const STORES: [string, () => Promise<Store>][] = [
  ['in memory', async () => createMemoryStore({ clock: () => NOW })],
  ...CALL_PATHS.map(
    (path) =>
      [`on Redis (${path})`, () => openPathStore(redis, path)] as [string, () => Promise<Store>],
  ),
];

describe.each(STORES)('an overdraw %s', (_name, open) => {
  let store: Store;
  beforeAll(async () => {
    store = await open();
  });
  afterAll(async () => {
    await store?.close();
  });

  it.each<Algorithm>(['fixed_window', 'sliding_window', 'token_bucket'])(
    'on a %s says how far past its limit it is, and nothing within it',
    async (algorithm) => {
      const key = `past:{${_name}}:${algorithm}`;
      const charge = async (cost: number) =>
        (await store.decide([overdraw(algorithm, key, cost)], NOW)).results[0]!;
      const within = await charge(8);
      expect(within).toMatchObject({ remaining: 2 });
      expect(within.past).toBeUndefined();
      // 8 + 5 of 10: 3 past, and nothing left.
      expect(await charge(5)).toMatchObject({ remaining: 0, past: 3 });
      expect(await charge(4)).toMatchObject({ remaining: 0, past: 7 });
      // A refund brings it back under.
      const refund = { ...overdraw(algorithm, key, 9), overdraw: false, giveBack: true };
      const back = (await store.decide([refund], NOW)).results[0]!;
      expect(back).toMatchObject({ remaining: 2 });
      expect(back.past).toBeUndefined();
    },
  );

  it('takes a token bucket deeper into debt when deep: five minutes of refills past its burst', async () => {
    const key = `past:{${_name}}:deep`;
    const charge = async (deepDebt: boolean) =>
      (await store.decide([{ ...overdraw('token_bucket', key, 100), deepDebt }], NOW)).results[0]!;
    // 10 a minute, a burst of 10: one burst deep at most, and 10 + 50 deep.
    expect(await charge(false)).toMatchObject({ remaining: 0, past: 10 });
    expect(await charge(true)).toMatchObject({ remaining: 0, past: 60 });
  });

  it('says nothing past a limit for a counter that is not an overdraw', async () => {
    const key = `past:{${_name}}:plain`;
    const plain = { ...overdraw('fixed_window', key, 12), overdraw: false };
    const result = (await store.decide([plain], NOW)).results[0]!;
    expect(result).toMatchObject({ fits: false, remaining: 10 });
    expect(result.past).toBeUndefined();
  });
});
