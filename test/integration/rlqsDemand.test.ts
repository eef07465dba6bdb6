// RLQS demand is shared through the store, so every instance splits a pool over the same
// clients. The same cases run on the in-memory demand and on a real redis-server.
import { Redis } from 'ioredis';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createMemoryDemand, createRedisDemand, type DemandStore } from '../../src/rlqs/demand.js';
import { startRedis, type TestRedis } from '../support/redis.js';

let redis: TestRedis;
let client: Redis;
beforeAll(async () => {
  redis = await startRedis();
  client = new Redis(redis.url);
});
afterAll(async () => {
  client?.disconnect();
  await redis?.stop();
});

const T0 = 1_800_000_000_000;
let pools = 0;

describe.each([
  ['memory', () => createMemoryDemand({ maxConsumers: 3 })],
  ['redis', () => createRedisDemand(client, { maxConsumers: 3 })],
])('RLQS demand in %s', (_name, make: () => DemandStore) => {
  const pool = () => `{t${(pools += 1)}}demand`;

  it('sums the live consumers of a pool, each counted once however often it reports', async () => {
    const store = make();
    const p = pool();
    expect(await store.record(p, 'a', 10, 3000, T0)).toEqual({ totalDemand: 10, consumers: 1 });
    expect(await store.record(p, 'b', 30, 3000, T0)).toEqual({ totalDemand: 40, consumers: 2 });
    expect(await store.record(p, 'a', 12.5, 3000, T0 + 100)).toEqual({
      totalDemand: 42.5,
      consumers: 2,
    });
  });

  it('forgets a consumer that stops reporting once its TTL passes', async () => {
    const store = make();
    const p = pool();
    await store.record(p, 'a', 10, 1000, T0);
    await store.record(p, 'b', 30, 5000, T0);
    expect(await store.record(p, 'b', 30, 5000, T0 + 1000)).toEqual({
      totalDemand: 30,
      consumers: 1,
    });
  });

  it('holds at most its consumer bound, and still counts those it holds', async () => {
    const store = make();
    const p = pool();
    for (const c of ['a', 'b', 'c']) await store.record(p, c, 1, 5000, T0);
    expect(await store.record(p, 'd', 100, 5000, T0)).toEqual({ totalDemand: 3, consumers: 3 });
    expect(await store.record(p, 'a', 2, 5000, T0)).toEqual({ totalDemand: 4, consumers: 3 });
  });

  it('keeps pools apart', async () => {
    const store = make();
    const [p, q] = [pool(), pool()];
    await store.record(p, 'a', 10, 5000, T0);
    expect(await store.record(q, 'a', 1, 5000, T0)).toEqual({ totalDemand: 1, consumers: 1 });
  });
});

describe('RLQS demand in Redis', () => {
  it('expires the whole pool with its last consumer, and two connections see one pool', async () => {
    const other = new Redis(redis.url);
    try {
      const [one, two] = [client, other].map((c) => createRedisDemand(c, { maxConsumers: 10 }));
      await one!.record('{x}pool', 'a', 5, 60_000, undefined);
      expect(await two!.record('{x}pool', 'b', 5, 60_000, undefined)).toEqual({
        totalDemand: 10,
        consumers: 2,
      });
      const ttl = await client.pttl('{x}pool');
      expect(ttl).toBeGreaterThan(50_000);
      expect(ttl).toBeLessThanOrEqual(60_000);
    } finally {
      other.disconnect();
    }
  });
});
