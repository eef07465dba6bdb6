import { status as grpcStatus, type ServiceError } from '@grpc/grpc-js';
import { afterAll, afterEach, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { decisionCalls, startRedis, type TestRedis } from '../support/redis.js';
import {
  codes,
  d,
  eventually,
  healthStatus,
  startTollgate,
  type Tollgate,
} from '../support/tollgate.js';

// One Redis call per request, and the failures a Redis deployment really has: a lost script
// cache, a restart and an outage. Each answers as FAILURE_MODE says, within REDIS_TIMEOUT plus a
// margin, and the service recovers by itself.

const RULES = `
domain: api
tenant_key: tenant
descriptors:
  - key: tenant
    rate_limit: {unit: hour, requests_per_unit: 1000}
    descriptors:
      - key: route
        rate_limit: {unit: minute, requests_per_unit: 100, algorithm: token_bucket}
  - key: remote_address
    rate_limit: {unit: second, requests_per_unit: 50, algorithm: fixed_window}
`;
const THREE = {
  domain: 'api',
  descriptors: [
    d('tenant', 'acme'),
    d('tenant', 'acme', 'route', '/orders'),
    d('remote_address', '10.0.0.1'),
  ],
};
const TIMEOUT_MS = 200;
const SCRIPT_INTERNAL = new Set(['fcall', 'hmget', 'hset', 'pexpire', 'time', 'config|resetstat']);
const MARGIN_MS = 500;

let redis: TestRedis;
let tollgate: Tollgate | undefined;
beforeAll(async () => {
  redis = await startRedis();
});
afterAll(() => redis?.stop());
beforeEach(async () => {
  await redis.client.flushall();
});
afterEach(async () => {
  await tollgate?.stop();
  tollgate = undefined;
});

const scriptCalls = () => decisionCalls(redis.client);

describe('one round trip', () => {
  it('decides a request of three descriptors with one script call, counted by Redis', async () => {
    // Health probes only at start: on a busy machine the ten checks can outlast a probe's second,
    // and a probe is a script call too.
    tollgate = await startTollgate({
      rules: RULES,
      redisUrl: redis.url,
      env: { CLOCK: 'redis' },
      healthIntervalMs: 3_600_000,
    });
    await tollgate.check(THREE); // the first call may load the script
    await redis.client.config('RESETSTAT');
    for (let i = 0; i < 10; i++) expect(codes(await tollgate.check(THREE))[0]).toBe('OK');
    const info = await redis.client.info('commandstats');
    expect(info).toMatch(/^cmdstat_fcall:calls=10,/m);
    // Everything else counted is issued by the script itself, inside those 10 calls.
    const others = [...info.matchAll(/^cmdstat_([^:]+):/gm)].map((m) => m[1]);
    expect(others.filter((name) => !SCRIPT_INTERNAL.has(name!))).toEqual([]);
  });
});

describe('script cache loss', () => {
  it('survives SCRIPT FLUSH between requests with no failed call', async () => {
    tollgate = await startTollgate({ rules: RULES, redisUrl: redis.url });
    for (let i = 0; i < 5; i++) {
      await redis.client.script('FLUSH');
      const response = await tollgate.check(THREE);
      expect(codes(response)).toEqual(['OK', 'OK', 'OK', 'OK']);
      expect(response.statuses![0]!.limit_remaining).toBe(999 - i);
    }
    expect(await scriptCalls()).toBeGreaterThanOrEqual(5);
  });

  it('survives a Redis restart: calls recover by themselves, with no NOSCRIPT error', async () => {
    tollgate = await startTollgate({
      rules: RULES,
      redisUrl: redis.url,
      env: { REDIS_TIMEOUT: `${TIMEOUT_MS}ms` },
    });
    expect(codes(await tollgate.check(THREE))[0]).toBe('OK');
    await redis.restart();
    const failures: string[] = [];
    await eventually(async () => {
      try {
        return codes(await tollgate!.check(THREE))[0] === 'OK';
      } catch (error) {
        failures.push((error as ServiceError).details);
        return false;
      }
    });
    // While reconnecting, calls may fail as UNAVAILABLE; never with a lost script.
    expect(failures.filter((details) => /NOSCRIPT/.test(details))).toEqual([]);
    // The restarted Redis is empty: the counter starts again.
    expect((await tollgate.check(THREE)).statuses![0]!.limit_remaining).toBe(998);
  });
});

describe.each([
  { mode: 'error', expected: 'UNAVAILABLE', health: 'NOT_SERVING' },
  { mode: 'deny', expected: 'OVER_LIMIT', health: 'SERVING' },
  { mode: 'allow', expected: 'OK', health: 'SERVING' },
])('Redis down with FAILURE_MODE=$mode', ({ mode, expected, health }) => {
  it(`answers ${expected} within the timeout plus a margin, then recovers`, async () => {
    tollgate = await startTollgate({
      rules: RULES,
      redisUrl: redis.url,
      env: { FAILURE_MODE: mode, REDIS_TIMEOUT: `${TIMEOUT_MS}ms` },
    });
    tollgate.clock.advance(0);
    expect(codes(await tollgate.check(THREE))[0]).toBe('OK');
    await redis.kill();

    for (let i = 0; i < 5; i++) {
      const started = Date.now();
      let answer: string;
      try {
        answer = codes(await tollgate.check(THREE))[0]!;
      } catch (error) {
        expect((error as ServiceError).code).toBe(grpcStatus.UNAVAILABLE);
        answer = 'UNAVAILABLE';
      }
      expect(answer).toBe(expected);
      expect(Date.now() - started).toBeLessThan(TIMEOUT_MS + MARGIN_MS);
    }
    await eventually(async () => (await healthStatus(tollgate!.address)) === health, 5_000);

    await redis.restart();
    await eventually(async () => codes(await tollgate!.check(THREE))[0] === 'OK');
    await eventually(async () => (await healthStatus(tollgate!.address)) === 'SERVING', 5_000);
  });
});
