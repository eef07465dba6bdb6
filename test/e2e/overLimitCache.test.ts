// The over-limit cache against real Redis: an abusive tenant hammering a spent limit, replayed on
// one injected clock through a service with the cache and one without (each with its own Redis),
// gets the same answers while the cached one makes a fraction of the script calls. Then with
// CLOCK=redis, where the cache runs on the service's own clock against Redis TIME.
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import type { RateLimitRequestObject } from '@tollgate/client';
import { decisionCalls, startRedis, type TestRedis } from '../support/redis.js';
import {
  codes,
  d,
  manualClock,
  resetMs,
  startTollgate,
  type Tollgate,
} from '../support/tollgate.js';

const RULES = `
domain: shop
descriptors:
  - key: tenant
    rate_limit: {name: tenant, unit: minute, requests_per_unit: 1000, algorithm: sliding_window}
    descriptors:
      - key: route
        rate_limit: {name: route, unit: minute, requests_per_unit: 10, algorithm: fixed_window}
  - key: hourly
    rate_limit: {name: hourly, unit: hour, requests_per_unit: 5, algorithm: fixed_window}
  - key: second
    rate_limit: {name: second, unit: second, requests_per_unit: 3, algorithm: sliding_window}
`;

/** Decision script calls Redis has served (EVALSHA, and EVAL after a NOSCRIPT). */
async function scriptCalls(redis: TestRedis): Promise<number> {
  return decisionCalls(redis.client);
}

async function cacheHits(tollgate: Tollgate): Promise<number> {
  const text = await (await fetch(`${tollgate.httpUrl}/metrics`)).text();
  return Number(/^tollgate_over_limit_cache_hits_total (\d+)/m.exec(text)?.[1] ?? NaN);
}

// The route alone: once it is spent, every limited descriptor of the request is over, which is
// when the cache may answer.
const request = (tenant: string): RateLimitRequestObject => ({
  domain: 'shop',
  descriptors: [d('tenant', tenant, 'route', '/search')],
});

describe('an abusive tenant, with CLOCK=local on one injected clock', () => {
  let redisOn: TestRedis;
  let redisOff: TestRedis;
  const running: Tollgate[] = [];
  beforeAll(async () => {
    [redisOn, redisOff] = await Promise.all([startRedis(), startRedis()]);
  });
  afterAll(async () => {
    await Promise.all(running.map((t) => t.stop()));
    await Promise.all([redisOn?.stop(), redisOff?.stop()]);
  });

  it('gets the answers it gets without the cache, for a fraction of the script calls', async () => {
    const clock = manualClock();
    // The health probe runs at start-up only: these tests count script calls.
    const HOUR = 3_600_000;
    const on = await startTollgate({
      rules: RULES,
      redisUrl: redisOn.url,
      clock,
      healthIntervalMs: HOUR,
    });
    running.push(on);
    const off = await startTollgate({
      rules: RULES,
      redisUrl: redisOff.url,
      clock,
      env: { OVER_LIMIT_CACHE_SIZE: '0' },
      healthIntervalMs: HOUR,
    });
    running.push(off);
    const before = [await scriptCalls(redisOn), await scriptCalls(redisOff)];

    // Two minutes: the abuser every 100 ms, a well-behaved tenant every 10 s.
    let requests = 0;
    let denied = 0;
    for (let tick = 0; tick < 1_200; tick++, clock.advance(100)) {
      const tenants = tick % 100 === 0 ? ['abuser', 'good'] : ['abuser'];
      for (const tenant of tenants) {
        const [withCache, without] = await Promise.all([
          on.check(request(tenant)),
          off.check(request(tenant)),
        ]);
        requests += 1;
        expect(withCache.overall_code).toBe(without.overall_code);
        // The route said it, with a reset no later than the store's.
        expect(codes(withCache)[1]).toBe(codes(without)[1]);
        const route = [withCache.statuses?.[0], without.statuses?.[0]];
        if (without.overall_code === 'OVER_LIMIT') {
          denied += 1;
          expect(resetMs(route[0] ?? {})).toBeLessThanOrEqual(resetMs(route[1] ?? {}) ?? 0);
        }
      }
    }

    const callsOn = (await scriptCalls(redisOn)) - (before[0] ?? 0);
    const callsOff = (await scriptCalls(redisOff)) - (before[1] ?? 0);
    const hits = await cacheHits(on);
    expect(callsOff).toBe(requests);
    expect(callsOn + hits).toBe(requests);
    // Per minute the abuser's route admits 10, and its first denial is its last call; the good
    // tenant's 12 checks all reach Redis.
    expect({ requests, denied, callsOff, callsOn, hits }).toEqual({
      requests: 1_212,
      denied: 1_180,
      callsOff: 1_212,
      callsOn: 2 * 11 + 12,
      hits: 1_178,
    });
  }, 120_000);
});

describe('with CLOCK=redis', () => {
  let redis: TestRedis;
  let tollgate: Tollgate | undefined;
  beforeAll(async () => {
    redis = await startRedis();
  });
  afterEach(async () => {
    await tollgate?.stop();
    tollgate = undefined;
  });
  afterAll(() => redis?.stop());

  async function start(env: Record<string, string> = {}): Promise<Tollgate> {
    await redis.client.flushall();
    tollgate = await startTollgate({
      rules: RULES,
      redisUrl: redis.url,
      env: { CLOCK: 'redis', ...env },
      // The health probe runs at start-up only: these tests count script calls.
      healthIntervalMs: 3_600_000,
    });
    return tollgate;
  }
  const hit = (key: string) => tollgate!.check({ domain: 'shop', descriptors: [d(key, 'x')] });

  it.each([
    { cache: 'on', size: '10000', calls: 6 },
    { cache: 'off', size: '0', calls: 300 },
  ])('admits 5 of 300 an hour, with $calls script calls when the cache is $cache', async (c) => {
    await start({ OVER_LIMIT_CACHE_SIZE: c.size });
    const before = await scriptCalls(redis);
    let admitted = 0;
    for (let i = 0; i < 300; i++) if ((await hit('hourly')).overall_code === 'OK') admitted += 1;
    expect(admitted).toBe(5);
    expect((await scriptCalls(redis)) - before).toBe(c.calls);
  });

  it('asks Redis again once the reset it reported from memory has passed', async () => {
    await start();
    let calls = await scriptCalls(redis);
    // Spend the window, until a denial comes from memory.
    let cached: number | undefined;
    for (let i = 0; i < 50 && cached === undefined; i++) {
      const response = await hit('second');
      const now = await scriptCalls(redis);
      if (response.overall_code === 'OVER_LIMIT' && now === calls) {
        cached = resetMs(response.statuses?.[0] ?? {});
      }
      calls = now;
    }
    expect(cached).toBeGreaterThan(0);
    await new Promise((resolve) => setTimeout(resolve, cached));
    // The deadline behind that reset has passed: the next check reaches Redis.
    const next = await hit('second');
    expect(await scriptCalls(redis)).toBe(calls + 1);
    // Redis frees the window at that moment, or within its round trip of it.
    let admitted = next.overall_code === 'OK';
    for (let i = 0; i < 20 && !admitted; i++) {
      await new Promise((resolve) => setTimeout(resolve, 5));
      admitted = (await hit('second')).overall_code === 'OK';
    }
    expect(admitted).toBe(true);
  });
});

describe('a spent descriptor beside one that is not', () => {
  let redis: TestRedis;
  let tollgate: Tollgate | undefined;
  beforeAll(async () => {
    redis = await startRedis();
  });
  afterAll(async () => {
    await tollgate?.stop();
    await redis?.stop();
  });

  it('goes to the store, so every descriptor says its own status and counts its hits', async () => {
    tollgate = await startTollgate({
      rules: `
domain: pair
descriptors:
  - key: key2
    rate_limit: {unit: minute, requests_per_unit: 20, algorithm: fixed_window}
  - key: key3
    rate_limit: {unit: minute, requests_per_unit: 10, algorithm: fixed_window}
`,
      redisUrl: redis.url,
    });
    const pair = { domain: 'pair', descriptors: [d('key2', 'X'), d('key3', 'X')] };
    const answers = [];
    for (let i = 0; i < 12; i++) answers.push(await tollgate.check(pair));
    const last = answers.at(-1)!;
    expect(codes(last)).toEqual(['OVER_LIMIT', 'OK', 'OVER_LIMIT']);
    // key2: its true status, not a bare OK. The two denials consumed nothing, so 10 are left.
    expect(last.statuses?.[0]).toMatchObject({
      code: 'OK',
      current_limit: { requests_per_unit: 20, unit: 'MINUTE' },
      limit_remaining: 10,
    });
    const text = await (await fetch(`${tollgate.httpUrl}/metrics`)).text();
    const hits = (key: string) =>
      Number(
        new RegExp(
          `^ratelimit_service_rate_limit_total_hits\\{domain="pair",key1="${key}",key2=""\\} (\\d+)`,
          'm',
        ).exec(text)?.[1],
      );
    expect([hits('key2'), hits('key3')]).toEqual([12, 12]);
    expect(Number(/^tollgate_over_limit_cache_hits_total (\d+)/m.exec(text)?.[1])).toBe(0);
  });
});
