import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startRedis, type TestRedis } from '../support/redis.js';
import { codes, d, resetMs, startTollgate, type Tollgate } from '../support/tollgate.js';

// With CLOCK=redis and no injected time, windows and refills follow Redis's own clock in real
// time. Windows of 1-2 s; every wait adds at least 150 ms, and a slow machine only adds more.

const MARGIN_MS = 150;
const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

let redis: TestRedis;
let tollgate: Tollgate;
beforeAll(async () => {
  redis = await startRedis();
  tollgate = await startTollgate({
    redisUrl: redis.url,
    env: { CLOCK: 'redis' },
    rules: `
domain: realtime
descriptors:
  - key: fixed
    rate_limit: {window: 2s, requests_per_unit: 1, algorithm: fixed_window}
  - key: sliding
    rate_limit: {window: 2s, requests_per_unit: 1, algorithm: sliding_window}
  - key: bucket
    rate_limit: {window: 2s, requests_per_unit: 1, algorithm: token_bucket}
`,
  });
});
afterAll(async () => {
  await tollgate?.stop();
  await redis?.stop();
});

const hit = (key: string) => tollgate.check({ domain: 'realtime', descriptors: [d(key, 'x')] });

describe.each(['fixed', 'sliding', 'bucket'])('%s, on Redis TIME', (key) => {
  it('denies until duration_until_reset has passed, then allows', async () => {
    let first = await hit(key);
    // A fixed window about to roll over would let the next request through: start afresh.
    if (key === 'fixed' && resetMs(first.statuses![0]!)! < 1_000) {
      await sleep(resetMs(first.statuses![0]!)! + MARGIN_MS);
      first = await hit(key);
    }
    expect(codes(first)[0]).toBe('OK');
    const denied = await hit(key);
    expect(codes(denied)[0]).toBe('OVER_LIMIT');
    const wait = resetMs(denied.statuses![0]!)!;
    expect(wait).toBeGreaterThan(0);
    expect(wait).toBeLessThanOrEqual(4_000);
    await sleep(wait + MARGIN_MS);
    expect(codes(await hit(key))[0]).toBe('OK');
  });
});
