// Redis memory stays bounded: after traffic on every algorithm and several windows, every counter
// key in Redis has a TTL no longer than the time it can still affect a decision, and a denied
// request writes nothing.
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { startRedis, type TestRedis } from '../support/redis.js';
import { codes, d, isProbeKey, startTollgate, type Tollgate } from '../support/tollgate.js';

const RULES = `
domain: ttl
descriptors:
  - key: fw_second
    rate_limit: {unit: second, requests_per_unit: 3, algorithm: fixed_window}
  - key: fw_5m
    rate_limit: {window: 5m, requests_per_unit: 4, algorithm: fixed_window}
  - key: sw_30s
    rate_limit: {window: 30s, requests_per_unit: 3, algorithm: sliding_window}
  - key: sw_hour
    rate_limit: {unit: hour, requests_per_unit: 5, algorithm: sliding_window}
  - key: tb_minute
    rate_limit: {unit: minute, requests_per_unit: 6, algorithm: token_bucket, burst: 3}
  - key: tb_10m
    rate_limit: {window: 10m, requests_per_unit: 2, algorithm: token_bucket, burst: 4}
`;

// The longest a counter can matter, by the key's "|algorithm:window" suffix: a fixed window lasts
// W, a sliding window counts into the next one (2W), a token bucket until it is full (B·W/L).
const LIFETIME_MS: Record<string, number> = {
  'fw:1000': 1_000,
  'fw:300000': 300_000,
  'sw:30000': 60_000,
  'sw:3600000': 7_200_000,
  'tb:60000': Math.ceil((3 * 60_000) / 6),
  'tb:600000': Math.ceil((4 * 600_000) / 2),
};
// Under CLOCK=local a key outlives its counter by CLOCK_SKEW_TOLERANCE, set here to 2 s.
const SLACK_MS = 2_000;

let redis: TestRedis;
let tollgate: Tollgate | undefined;
beforeAll(async () => {
  redis = await startRedis();
});
afterEach(async () => {
  await tollgate?.stop();
  tollgate = undefined;
});
afterAll(async () => {
  await redis?.stop();
});

async function start(): Promise<Tollgate> {
  await redis.client.flushall();
  tollgate = await startTollgate({
    rules: RULES,
    redisUrl: redis.url,
    env: { CLOCK_SKEW_TOLERANCE: '2s' },
  });
  return tollgate;
}

async function allKeys(): Promise<string[]> {
  const keys: string[] = [];
  let cursor = '0';
  do {
    const [next, batch] = await redis.client.scan(cursor, 'COUNT', 100);
    keys.push(...batch.filter((key) => !isProbeKey(key)));
    cursor = next;
  } while (cursor !== '0');
  return keys.sort();
}

/** Every key and its whole hash, to compare Redis before and after. */
async function snapshot(): Promise<Record<string, Record<string, string>>> {
  const state: Record<string, Record<string, string>> = {};
  for (const key of await allKeys()) state[key] = await redis.client.hgetall(key);
  return state;
}

const KINDS = ['fw_second', 'fw_5m', 'sw_30s', 'sw_hour', 'tb_minute', 'tb_10m'];

describe('counter keys in Redis', () => {
  it('all expire, no later than their algorithm needs them', async () => {
    const t = await start();
    for (let round = 0; round < 6; round++) {
      for (const [i, kind] of KINDS.entries()) {
        // Several tenants, costs of 1 to 3, and some requests that mix algorithms.
        const tenant = `tenant-${(round + i) % 3}`;
        await t.check({
          domain: 'ttl',
          descriptors: [d(kind, tenant)],
          hits_addend: 1 + (round % 3),
        });
        const partner = KINDS[(i + 1) % KINDS.length] as string;
        await t.check({
          domain: 'ttl',
          descriptors: [d(kind, `mix-${round}`), d(partner, tenant)],
        });
      }
      t.clock.advance(round % 2 === 0 ? 700 : 45_000);
    }

    const keys = await allKeys();
    const suffixes = new Set(keys.map((key) => key.slice(key.lastIndexOf('|') + 1)));
    expect([...suffixes].sort()).toEqual(Object.keys(LIFETIME_MS).sort());
    for (const key of keys) {
      const suffix = key.slice(key.lastIndexOf('|') + 1);
      const lifetime = LIFETIME_MS[suffix] as number;
      const pttl = await redis.client.pttl(key);
      expect(pttl, key).toBeGreaterThan(0);
      expect(pttl, key).toBeLessThanOrEqual(lifetime + SLACK_MS);
    }
  });

  it('are not written by a denied request, not even for a counter it would create', async () => {
    const t = await start();
    for (const kind of KINDS) {
      await t.check({ domain: 'ttl', descriptors: [d(kind, 'full')], hits_addend: 3 });
    }
    const before = await snapshot();
    expect(Object.keys(before)).toHaveLength(KINDS.length);

    // fw_second allows 3, so one more is denied; the fresh counters beside it must stay unwritten.
    const denied = await t.check({
      domain: 'ttl',
      descriptors: [d('fw_second', 'full'), ...KINDS.map((kind) => d(kind, 'fresh'))],
    });
    expect(codes(denied)[0]).toBe('OVER_LIMIT');
    expect(denied.statuses?.[0]?.code).toBe('OVER_LIMIT');
    // A cost that can never fit is denied too, and writes nothing either.
    const never = await t.check({
      domain: 'ttl',
      descriptors: [
        { ...d('sw_hour', 'other'), hits_addend: { value: '6' } },
        d('tb_10m', 'other'),
      ],
    });
    expect(never.overall_code).toBe('OVER_LIMIT');
    expect(await snapshot()).toEqual(before);
  });
});
