import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { startRedis, type TestRedis } from '../support/redis.js';
import { codes, d, resetMs, startTollgate, type Tollgate } from '../support/tollgate.js';

// The three algorithms at their boundaries, and BRIEF's promise about duration_until_reset: a
// retry at that moment succeeds and a retry 1 ms earlier fails. The service runs with CLOCK=local
// and an injected clock, against Redis and against the in-memory store.

const RULES = `
domain: algorithms
descriptors:
  - key: bucket
    rate_limit: {unit: minute, requests_per_unit: 10, algorithm: token_bucket, burst: 5}
  - key: sliding
    rate_limit: {unit: minute, requests_per_unit: 6, algorithm: sliding_window}
  - key: fixed
    rate_limit: {unit: minute, requests_per_unit: 3, algorithm: fixed_window}
`;

let redis: TestRedis;
beforeAll(async () => {
  redis = await startRedis();
});
afterAll(() => redis?.stop());

describe.each([{ store: 'memory' }, { store: 'redis' }])('$store store', ({ store }) => {
  let tollgate: Tollgate;
  afterEach(() => tollgate?.stop());

  async function start() {
    await redis.client.flushall();
    tollgate = await startTollgate({
      rules: RULES,
      redisUrl: store === 'redis' ? redis.url : undefined,
    });
    return tollgate;
  }
  const hit = (key: string, value = 'x') =>
    tollgate.check({ domain: 'algorithms', descriptors: [d(key, value)] });

  /** Denied now; still denied 1 ms before the reported reset; allowed exactly at it. */
  async function expectExactReset(key: string, expectedMs: number) {
    const denied = await hit(key);
    expect(codes(denied)).toEqual(['OVER_LIMIT', 'OVER_LIMIT']);
    const reset = resetMs(denied.statuses![0]!);
    expect(reset).toBe(expectedMs);
    tollgate.clock.advance(expectedMs - 1);
    expect(codes(await hit(key))[0]).toBe('OVER_LIMIT');
    tollgate.clock.advance(1);
    expect(codes(await hit(key))[0]).toBe('OK');
  }

  it('token bucket: the burst goes at once, then tokens refill at the configured rate', async () => {
    await start();
    for (let i = 0; i < 5; i++) {
      const ok = await hit('bucket');
      expect(codes(ok)).toEqual(['OK', 'OK']);
      expect(ok.statuses![0]!.limit_remaining).toBe(4 - i);
    }
    // 10 tokens a minute is one every 6 s.
    await expectExactReset('bucket', 6_000);
    await expectExactReset('bucket', 6_000);
    // Idle long enough to fill, the bucket holds its burst and no more.
    tollgate.clock.advance(3_600_000);
    const full = await hit('bucket');
    expect(full.statuses![0]!.limit_remaining).toBe(4);
    // Allowed: duration_until_reset is the time until the bucket is full again.
    expect(resetMs(full.statuses![0]!)).toBe(6_000);
  });

  it('sliding window: the previous window counts by its overlap (20 s in, two thirds)', async () => {
    await start();
    tollgate.clock.advance(30_000);
    for (let i = 0; i < 6; i++) expect(codes(await hit('sliding'))[0]).toBe('OK');
    expect(codes(await hit('sliding'))[0]).toBe('OVER_LIMIT');
    // 20 s into the next window: 6 × 40/60 = 4 still count, so 2 remain.
    tollgate.clock.advance(50_000);
    const first = await hit('sliding');
    expect(codes(first)[0]).toBe('OK');
    expect(first.statuses![0]!.limit_remaining).toBe(1);
    expect(resetMs(first.statuses![0]!)).toBe(100_000); // 2W - e
    expect(codes(await hit('sliding'))[0]).toBe('OK');
    expect(codes(await hit('sliding'))[0]).toBe('OVER_LIMIT');
  });

  it('sliding window: exact reset when the previous window blocks (c + k <= L)', async () => {
    await start();
    for (let i = 0; i < 6; i++) await hit('sliding');
    tollgate.clock.advance(80_000); // 20 s into the next window: 4 of the previous 6 count
    expect(codes(await hit('sliding'))[0]).toBe('OK');
    expect(codes(await hit('sliding'))[0]).toBe('OK');
    // c = 2: 4 + 2 + 1 > 6. The weight must fall to 3, at 30 s: W·(1 − (6−2−1)/6) − 20 s = 10 s.
    await expectExactReset('sliding', 10_000);
  });

  it('sliding window: exact reset when the current window is full (c + k > L)', async () => {
    await start();
    for (let i = 0; i < 6; i++) await hit('sliding');
    // (W − e) + W·(1 − (L−k)/c) = 60 s + 60 s × (1 − 5/6) = 70 s.
    await expectExactReset('sliding', 70_000);
  });

  it('fixed window: the count resets at the boundary', async () => {
    await start();
    tollgate.clock.advance(10_000);
    for (let i = 0; i < 3; i++) {
      const ok = await hit('fixed');
      expect(ok.statuses![0]!.limit_remaining).toBe(2 - i);
      expect(resetMs(ok.statuses![0]!)).toBe(50_000);
    }
    await expectExactReset('fixed', 50_000);
    expect((await hit('fixed')).statuses![0]!.limit_remaining).toBe(1);
  });

  it('keeps counters apart per value and per algorithm', async () => {
    await start();
    for (let i = 0; i < 3; i++) await hit('fixed', 'a');
    expect(codes(await hit('fixed', 'a'))[0]).toBe('OVER_LIMIT');
    expect(codes(await hit('fixed', 'b'))[0]).toBe('OK');
    expect(codes(await hit('sliding', 'a'))[0]).toBe('OK');
  });
});
