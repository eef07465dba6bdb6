import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createRedisStore } from '../../src/store/redisStore.js';
import type { CounterCheck, Store } from '../../src/store/Store.js';
import {
  CALL_PATHS,
  decisionCalls,
  openPathStore,
  startRedis,
  storeSettings,
  type TestRedis,
} from '../support/redis.js';

// REDIS_BATCH_LIMIT: decide calls made in the same event-loop turn (or within REDIS_BATCH_WINDOW)
// go to Redis as one script call, of at most that many requests, decided in the order they were
// made.

let redis: TestRedis;
beforeAll(async () => {
  redis = await startRedis();
});
afterAll(() => redis?.stop());

const counter = (key: string): CounterCheck => ({
  key,
  algorithm: 'sliding_window',
  windowMs: 3_600_000,
  limit: 50,
  burst: 50,
  cost: 1,
  shadow: false,
  quota: false,
  overdraw: false,
});

const scriptCalls = () => decisionCalls(redis.client);

describe.each(
  CALL_PATHS.flatMap((path) => [
    { path, batchLimit: 16, calls: 7 },
    { path, batchLimit: 1, calls: 100 },
  ]),
)('with REDIS_BATCH_LIMIT=$batchLimit, calls as $path', ({ path, batchLimit, calls }) => {
  it(`decides 100 calls made at once in ${calls} script calls, in the order made`, async () => {
    const store: Store = await openPathStore(redis, path, { batchLimit });
    try {
      await redis.client.config('RESETSTAT');
      const key = `tg:batch-${batchLimit}-${path}`;
      // Every other call also carries a counter of its own.
      const decisions = await Promise.all(
        Array.from({ length: 100 }, (_, i) =>
          store.decide(i % 2 ? [counter(key), counter(`${key}-${i}`)] : [counter(key)], undefined),
        ),
      );
      expect(await scriptCalls()).toBe(calls);
      // The first 50 made are the 50 allowed, each seeing what the ones before it consumed.
      expect(decisions.map((decision) => decision.allowed)).toEqual(
        Array.from({ length: 100 }, (_, i) => i < 50),
      );
      expect(decisions.slice(0, 50).map((decision) => decision.results[0]?.remaining)).toEqual(
        Array.from({ length: 50 }, (_, i) => 49 - i),
      );
    } finally {
      await store.close();
    }
  });
});

/** How many times the server ran `command`, a script's inner calls included. */
async function commandCalls(command: string): Promise<number> {
  const stats = await redis.client.info('commandstats');
  return Number(new RegExp(`^cmdstat_${command}:calls=(\\d+)`, 'm').exec(stats)?.[1] ?? 0);
}

describe.each(CALL_PATHS)('a batch of fixed windows, calls as %s', (path) => {
  it('reads and writes a counter its requests share once per call', async () => {
    const store: Store = await openPathStore(redis, path, { batchLimit: 16 });
    try {
      const tenant = `tg:{shared-${path}}:tenant`;
      const fixed = (key: string): CounterCheck => ({
        ...counter(key),
        algorithm: 'fixed_window',
        limit: 10,
      });
      // A first call makes both the tenant's counter and the script or function known.
      await store.decide([fixed(tenant)], undefined);
      await redis.client.config('RESETSTAT');
      // 16 requests in one call: all on the tenant's counter, each with one of its own.
      const decisions = await Promise.all(
        Array.from({ length: 16 }, (_, i) =>
          store.decide([fixed(tenant), fixed(`${tenant}:${i}`)], undefined),
        ),
      );
      expect(await scriptCalls()).toBe(1);
      // The tenant's 9 left go to the first 9, in order; nothing of a denied request is written.
      expect(decisions.map((decision) => decision.results[0]?.remaining)).toEqual([
        8, 7, 6, 5, 4, 3, 2, 1, 0, 0, 0, 0, 0, 0, 0, 0,
      ]);
      expect(await redis.client.hget(tenant, 'c')).toBe('10');
      expect(await redis.client.exists(`${tenant}:9`)).toBe(0);
      // One read of each counter, and one write of each written one: 1 + 16 and 1 + 9.
      expect(await commandCalls('hmget')).toBe(17);
      expect(await commandCalls('hset')).toBe(10);
      // A counter first written in the call expires with its window.
      expect(await redis.client.pttl(`${tenant}:0`)).toBeGreaterThan(0);
    } finally {
      await store.close();
    }
  });
});

describe.each(CALL_PATHS)('a batch of fixed windows on Redis TIME, calls as %s', (path) => {
  const HOUR = 3_600_000;
  const DAY = 86_400_000;

  it("gives each request its own remaining and each counter its window's reset", async () => {
    const store: Store = await openPathStore(redis, path, { batchLimit: 16 });
    try {
      const tag = `{resets-${path}}`;
      const fixed = (name: string, windowMs: number, limit: number, cost = 1): CounterCheck => ({
        ...counter(`tg:${tag}:${name}`),
        algorithm: 'fixed_window',
        windowMs,
        limit,
        burst: limit,
        cost,
      });
      const reference = (name: string, limit: number, cost: number): CounterCheck => ({
        ...fixed(name, HOUR, limit, cost),
        reference: { stop: false, held: false, cached: false },
      });
      await redis.client.set(`tg:${tag}:foreign`, 'not a counter');
      const requests: CounterCheck[][] = [
        [fixed('a', HOUR, 5), fixed('b', DAY, 3)],
        [fixed('a', HOUR, 5), fixed('b', DAY, 3)],
        // A key that tollgate did not write fails its request alone, and writes nothing of it.
        [fixed('a', HOUR, 5), fixed('foreign', HOUR, 5)],
        // A cost over the limit never fits: denied, and no reset would help.
        [fixed('a', HOUR, 5, 9)],
        [fixed('b', DAY, 3), fixed('a', HOUR, 5)],
        [reference('r', 2, 3)],
      ];
      await redis.client.config('RESETSTAT');
      const before = await redisMs();
      const outcomes = await Promise.allSettled(
        requests.map((checks) => store.decide(checks, undefined)),
      );
      const after = await redisMs();
      expect(await scriptCalls()).toBe(1);
      const decided = outcomes.map((outcome) =>
        outcome.status === 'fulfilled' ? outcome.value : undefined,
      );
      expect(outcomes[2]?.status).toBe('rejected');
      expect(decided.map((decision) => decision?.allowed)).toEqual([
        true,
        true,
        undefined,
        false,
        true,
        false,
      ]);
      expect(
        decided.map((decision) =>
          decision?.results.map(({ remaining, fits }) => [remaining, fits]),
        ),
      ).toEqual([
        [
          [4, true],
          [2, true],
        ],
        [
          [3, true],
          [1, true],
        ],
        undefined,
        [[3, false]],
        [
          [0, true],
          [2, true],
        ],
        // The reference's counting: remaining is the count, past the limit.
        [[3, false]],
      ]);
      // Each counter's reset is the rest of its own window, on Redis's clock.
      const rest = (windowMs: number) => [
        windowMs - (after % windowMs),
        windowMs - (before % windowMs),
      ];
      const within = (resetMs: number | undefined, windowMs: number) => {
        const [least, most] = rest(windowMs) as [number, number];
        return resetMs !== undefined && resetMs >= least && resetMs <= most;
      };
      const resets = decided.map((decision) => decision?.results.map(({ resetMs }) => resetMs));
      for (const i of [0, 1]) {
        expect(within(resets[i]?.[0], HOUR)).toBe(true);
        expect(within(resets[i]?.[1], DAY)).toBe(true);
      }
      expect(resets[3]).toEqual([-1]);
      expect(within(resets[4]?.[0], DAY)).toBe(true);
      expect(within(resets[4]?.[1], HOUR)).toBe(true);
      expect(within(resets[5]?.[0], HOUR)).toBe(true);
      // Nothing of the failed request was written: 'a' holds the 3 allowed requests' count.
      expect(await redis.client.hget(`tg:${tag}:a`, 'c')).toBe('3');
    } finally {
      await store.close();
    }
  });
});

/** Redis's clock, in ms. */
async function redisMs(): Promise<number> {
  const [seconds, micros] = await redis.client.time();
  return Number(seconds) * 1000 + Math.floor(Number(micros) / 1000);
}

describe('with REDIS_BATCH_WINDOW', () => {
  it('decides calls made within the window in one script call, in the order made', async () => {
    // A window far longer than the gaps between the calls, so a busy machine keeps them in it.
    const store = await openPathStore(
      redis,
      'functions',
      { batchLimit: 16, batchWindowMs: 400 },
      { timeoutMs: 5_000 },
    );
    try {
      await redis.client.config('RESETSTAT');
      const pending = [];
      for (let i = 0; i < 5; i++) {
        pending.push(store.decide([{ ...counter('tg:window'), limit: 3, burst: 3 }], undefined));
        await new Promise((resolve) => setTimeout(resolve, 10));
      }
      const decisions = await Promise.all(pending);
      expect(await scriptCalls()).toBe(1);
      expect(decisions.map((decision) => decision.allowed)).toEqual([
        true,
        true,
        true,
        false,
        false,
      ]);
    } finally {
      await store.close();
    }
  });
});

describe('a batch behind a stalled Redis', () => {
  // A batch that waited for the one before it to time out would fail at about twice the timeout
  // less the gap between them (2 x 500 - 20 ms); one on its own fails at the timeout.
  const TIMEOUT_MS = 500;
  const GAP_MS = 20;
  const MARGIN_MS = 350;

  it('fails every call in it within the timeout, and the next batch is not held up', async () => {
    const store = createRedisStore(storeSettings(redis, { timeoutMs: TIMEOUT_MS }), {
      batchLimit: 16,
    });
    try {
      await store.ping();
      const admin = redis.client.duplicate();
      const sleeping = admin.call('DEBUG', 'SLEEP', '2');
      await new Promise((resolve) => setTimeout(resolve, 50));
      const timed = async (delayMs: number) => {
        await new Promise((resolve) => setTimeout(resolve, delayMs));
        const started = performance.now();
        const outcomes = await Promise.allSettled(
          Array.from({ length: 20 }, (_, i) => store.decide([counter(`tg:stall-${i}`)], undefined)),
        );
        return { ms: performance.now() - started, outcomes };
      };
      const batches = await Promise.all([timed(0), timed(GAP_MS)]);
      await sleeping;
      admin.disconnect();
      for (const { ms, outcomes } of batches) {
        expect(outcomes.every((outcome) => outcome.status === 'rejected')).toBe(true);
        expect(ms).toBeLessThan(TIMEOUT_MS + MARGIN_MS);
      }
    } finally {
      await store.close();
    }
  });
});
