import { Redis } from 'ioredis';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { spawnTollgate } from '../support/processes.js';
import { startRedis, type TestRedis } from '../support/redis.js';
import { callCheck, d } from '../support/tollgate.js';

// SIGTERM while calls are in flight: health turns NOT_SERVING, every call already accepted is
// answered (none is cut off), and the process exits 0. Redis is stalled with DEBUG SLEEP so that
// the calls are still waiting on it when the signal arrives.

let redis: TestRedis;
beforeAll(async () => {
  redis = await startRedis();
});
afterAll(() => redis?.stop());

describe('SIGTERM during load', () => {
  it('drains every call in flight, then exits 0', async () => {
    const tollgate = await spawnTollgate(
      'domain: drain\ndescriptors:\n  - key: k\n    rate_limit: {unit: hour, requests_per_unit: 1000}\n',
      { REDIS_URL: redis.url, REDIS_TIMEOUT: '5s', SHUTDOWN_GRACE: '10s' },
    );
    // Warm the connection and the script cache, so the calls below only wait on the stall.
    await callCheck(tollgate.client, { domain: 'drain', descriptors: [d('k', 'warm')] });

    const staller = new Redis({ host: redis.host, port: redis.port });
    const stall = staller.call('DEBUG', 'SLEEP', '1');
    await new Promise((resolve) => setTimeout(resolve, 50));
    const calls = Array.from({ length: 40 }, (_, i) =>
      callCheck(tollgate.client, { domain: 'drain', descriptors: [d('k', `v${i % 4}`)] }, 15_000),
    );
    await new Promise((resolve) => setTimeout(resolve, 200)); // the calls reach the server
    const exit = new Promise<number | null>((resolve) => tollgate.child.once('exit', resolve));
    tollgate.child.kill('SIGTERM');

    const answers = await Promise.allSettled(calls);
    await stall;
    staller.disconnect();
    const codes = answers.map((a) =>
      a.status === 'fulfilled' ? a.value.overall_code : String(a.reason),
    );
    expect(codes).toEqual(calls.map(() => 'OK'));
    expect(await exit).toBe(0);
    tollgate.client.close();
  });
});
