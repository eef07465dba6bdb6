// RLQS demand is shared through the store, so every instance splits a pool over the same
// clients. The same cases run on the in-memory demand and on a real redis-server.
// The Redis demand runs on the store's own connection, as the service opens it.
import { Redis } from 'ioredis';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { StoreError } from '../../src/core/errors.js';
import { readSettings } from '../../src/process/settings.js';
import { createMemoryDemand, createRedisDemand, type DemandStore } from '../../src/store/demand.js';
import { createRedisStore, type RedisStore } from '../../src/store/redisStore.js';
import { startRedis, type TestRedis } from '../support/redis.js';

let redis: TestRedis;
let client: Redis;
const stores: RedisStore[] = [];
/** A store connected to `url`, as the service's is once its health probe has run. */
async function storeOn(url: string): Promise<RedisStore> {
  const store = createRedisStore(readSettings({ REDIS_URL: url, REDIS_TIMEOUT: '2s' }).redis!);
  stores.push(store);
  await store.ping();
  return store;
}
beforeAll(async () => {
  redis = await startRedis();
  client = new Redis(redis.url);
});
afterAll(async () => {
  client?.disconnect();
  for (const store of stores) await store.close();
  await redis?.stop();
});

const T0 = 1_800_000_000_000;
let pools = 0;

describe.each([
  ['memory', async () => createMemoryDemand({ maxConsumers: 3 })],
  ['redis', async () => createRedisDemand((await storeOn(redis.url)).access, { maxConsumers: 3 })],
])('RLQS demand in %s', (_name, make: () => Promise<DemandStore>) => {
  const pool = () => `{t${(pools += 1)}}demand`;

  it('sums the live consumers of a pool, each counted once however often it reports', async () => {
    const store = await make();
    const p = pool();
    expect(await store.record(p, 'a', 10, 3000, T0)).toEqual({
      totalDemand: 10,
      consumers: 1,
      recorded: true,
    });
    expect(await store.record(p, 'b', 30, 3000, T0)).toEqual({
      totalDemand: 40,
      consumers: 2,
      recorded: true,
    });
    expect(await store.record(p, 'a', 12.5, 3000, T0 + 100)).toEqual({
      totalDemand: 42.5,
      consumers: 2,
      recorded: true,
    });
  });

  it('forgets a consumer that stops reporting once its TTL passes', async () => {
    const store = await make();
    const p = pool();
    await store.record(p, 'a', 10, 1000, T0);
    await store.record(p, 'b', 30, 5000, T0);
    expect(await store.record(p, 'b', 30, 5000, T0 + 1000)).toEqual({
      totalDemand: 30,
      consumers: 1,
      recorded: true,
    });
  });

  it('holds at most its consumer bound, and still counts those it holds', async () => {
    const store = await make();
    const p = pool();
    for (const c of ['a', 'b', 'c']) await store.record(p, c, 1, 5000, T0);
    expect(await store.record(p, 'd', 100, 5000, T0)).toEqual({
      totalDemand: 3,
      consumers: 3,
      recorded: false,
    });
    expect(await store.record(p, 'a', 2, 5000, T0)).toEqual({
      totalDemand: 4,
      consumers: 3,
      recorded: true,
    });
  });

  it('keeps a pool as long as its longest-lived consumer', async () => {
    const store = await make();
    const p = pool();
    await store.record(p, 'long', 5, 60_000, T0);
    await store.record(p, 'short', 1, 1_000, T0);
    expect(await store.record(p, 'short', 1, 1_000, T0 + 30_000)).toEqual({
      totalDemand: 6,
      consumers: 2,
      recorded: true,
    });
  });

  it('drops a consumer whose stream closed, at once', async () => {
    const store = await make();
    const p = pool();
    await store.record(p, 'a', 10, 60_000, T0);
    await store.record(p, 'b', 30, 60_000, T0);
    await store.forget(p, 'a');
    expect(await store.record(p, 'b', 30, 60_000, T0 + 1)).toEqual({
      totalDemand: 30,
      consumers: 1,
      recorded: true,
    });
  });

  it('keeps pools apart', async () => {
    const store = await make();
    const [p, q] = [pool(), pool()];
    await store.record(p, 'a', 10, 5000, T0);
    expect(await store.record(q, 'a', 1, 5000, T0)).toEqual({
      totalDemand: 1,
      consumers: 1,
      recorded: true,
    });
  });
});

describe('RLQS demand in Redis', () => {
  it('expires the whole pool with its last consumer, and two connections see one pool', async () => {
    const [one, two] = [await storeOn(redis.url), await storeOn(redis.url)].map((store) =>
      createRedisDemand(store.access, { maxConsumers: 10 }),
    );
    await one!.record('{x}pool', 'a', 5, 60_000, undefined);
    expect(await two!.record('{x}pool', 'b', 5, 60_000, undefined)).toEqual({
      totalDemand: 10,
      consumers: 2,
      recorded: true,
    });
    const ttl = await client.pttl('{x}pool');
    expect(ttl).toBeGreaterThan(50_000);
    expect(ttl).toBeLessThanOrEqual(60_000);
    // A consumer of a shorter TTL leaves the pool's own as long as the longest.
    await one!.record('{x}pool', 'c', 1, 1_000, undefined);
    expect(await client.pttl('{x}pool')).toBeGreaterThan(50_000);
  });

  it('fails with the StoreError a check would get when Redis is unreachable', async () => {
    const gone = await startRedis();
    const store = await storeOn(gone.url);
    const demand = createRedisDemand(store.access, { maxConsumers: 10 });
    await demand.record('{y}pool', 'a', 1, 1000, undefined);
    await gone.stop();
    const failed = await demand.record('{y}pool', 'a', 1, 1000, undefined).catch((e) => e);
    expect(failed).toBeInstanceOf(StoreError);
    expect((failed as StoreError).kind).toMatch(/connection|timeout/);
  });
});
