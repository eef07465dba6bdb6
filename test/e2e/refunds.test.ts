// Refunds (is_negative_hits), as a caller sees them: a descriptor that gives its cost back to the
// budget instead of taking it. Every case runs on the in-memory store and on Redis, through the
// fast path and through grpc-js; /json, the client package and the CLI have their own cases.
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import type { RateLimitRequestObject, RateLimitResponseObject } from '@tollgate/client';
import { createTollgateClient } from '@tollgate/client';
import { metricValue } from '../support/metrics.js';
import { startRedis, type TestRedis } from '../support/redis.js';
import { codes, d, resetMs, startTollgate, type Tollgate } from '../support/tollgate.js';

const RULES = `
domain: budgets
descriptors:
  - key: tokens
    rate_limit: {unit: hour, requests_per_unit: 10, algorithm: fixed_window}
  - key: sliding
    rate_limit: {unit: hour, requests_per_unit: 10, algorithm: sliding_window}
  - key: bucket
    rate_limit: {unit: hour, requests_per_unit: 10, algorithm: token_bucket, burst: 10}
  - key: shadow
    rate_limit: {unit: hour, requests_per_unit: 10}
    shadow_mode: true
  - key: free
    rate_limit: {unlimited: true}
  - key: plan
    rate_limit: {unit: hour, requests_per_unit: 10, name: plan}
  - key: premium
    rate_limit: {unit: hour, requests_per_unit: 1000, replaces: [{name: plan}]}
  - key: usage
    rate_limit: {unit: hour, requests_per_unit: 100, algorithm: fixed_window, overdraw: true}
  - key: usage_sliding
    rate_limit: {unit: hour, requests_per_unit: 100, algorithm: sliding_window, overdraw: true}
  - key: usage_bucket
    rate_limit: {unit: hour, requests_per_unit: 100, algorithm: token_bucket, burst: 100, overdraw: true}
  - key: budget
    rate_limit: {unit: hour, requests_per_unit: 100, algorithm: fixed_window}
  - key: huge
    rate_limit: {unit: hour, requests_per_unit: 4294967295, algorithm: fixed_window}
`;

type Descriptor = NonNullable<RateLimitRequestObject['descriptors']>[number];

/** A descriptor of `entries` that costs `hits`, given back when `refund`. */
function spend(hits: number | undefined, refund: boolean, ...entries: string[]): Descriptor {
  return {
    ...d(...entries),
    ...(hits === undefined ? {} : { hits_addend: { value: String(hits) } }),
    ...(refund ? { is_negative_hits: true } : {}),
  };
}
const charge = (hits: number, ...entries: string[]) => spend(hits, false, ...entries);
const refund = (hits: number | undefined, ...entries: string[]) => spend(hits, true, ...entries);
const resetOf = (response: RateLimitResponseObject) => resetMs(response.statuses?.[0] ?? {});
const left = (response: RateLimitResponseObject) =>
  (response.statuses ?? []).map((status) => status.limit_remaining);

let redis: TestRedis;
beforeAll(async () => {
  redis = await startRedis();
});
afterAll(async () => {
  await redis?.stop();
});

const SETUPS = [
  { store: 'memory', fastPath: true },
  { store: 'memory', fastPath: false },
  { store: 'redis', fastPath: true },
  { store: 'redis', fastPath: false },
] as const;

describe.each(SETUPS)('refunds on the $store store (fast path: $fastPath)', (setup) => {
  let tollgate: Tollgate | undefined;
  afterEach(async () => {
    await tollgate?.stop();
    tollgate = undefined;
  });
  async function start(env: Record<string, string> = {}): Promise<Tollgate> {
    if (setup.store === 'redis') await redis.client.flushall();
    tollgate = await startTollgate({
      rules: RULES,
      env: { GRPC_FAST_PATH: String(setup.fastPath), ...env },
      ...(setup.store === 'redis' ? { redisUrl: redis.url } : {}),
    });
    return tollgate;
  }
  const check = (descriptors: Descriptor[], hits_addend?: number) =>
    (tollgate as Tollgate).check({
      domain: 'budgets',
      descriptors,
      ...(hits_addend === undefined ? {} : { hits_addend }),
    });

  it.each([{ mode: 'tollgate' }, { mode: 'reference' }])(
    'gives back what was charged, never below nothing ($mode counting)',
    async ({ mode }) => {
      await start(mode === 'reference' ? { COMPAT_MODE: 'reference' } : {});
      const steps: (readonly [Descriptor, string, number])[] = [
        [charge(5, 'tokens', 't'), 'OK', 5],
        [refund(3, 'tokens', 't'), 'OK', 8],
        [charge(1, 'tokens', 't'), 'OK', 7],
        [refund(5, 'tokens', 't'), 'OK', 10],
        [charge(10, 'tokens', 't'), 'OK', 0],
        [charge(1, 'tokens', 't'), 'OVER_LIMIT', 0],
        // The reference counts a denied charge: 11, so a refund of 4 leaves 7.
        ...(mode === 'reference'
          ? ([
              [refund(4, 'tokens', 't'), 'OK', 3],
              [charge(3, 'tokens', 't'), 'OK', 0],
            ] as const)
          : ([
              [refund(4, 'tokens', 't'), 'OK', 4],
              [charge(4, 'tokens', 't'), 'OK', 0],
            ] as const)),
      ];
      for (const [descriptor, code, remaining] of steps) {
        const response = await check([descriptor]);
        expect({ code: response.overall_code, left: left(response) }).toEqual({
          code,
          left: [remaining],
        });
      }
    },
  );

  it("costs the descriptor's hits_addend, else the request's (0 meaning 1), and an explicit 0 gives nothing back", async () => {
    await start();
    await check([charge(8, 'tokens', 'cost')]);
    expect(left(await check([refund(undefined, 'tokens', 'cost')], 2))).toEqual([4]);
    expect(left(await check([refund(undefined, 'tokens', 'cost')]))).toEqual([5]);
    expect(left(await check([refund(undefined, 'tokens', 'cost')], 0))).toEqual([6]);
    const none = await check([refund(0, 'tokens', 'cost')], 5);
    expect({ codes: codes(none), left: left(none) }).toEqual({ codes: ['OK', 'OK'], left: [6] });
    expect(left(await check([charge(0, 'tokens', 'cost')]))).toEqual([6]);
  });

  it('answers OK and gives back even when the request is denied by another descriptor', async () => {
    await start();
    await check([charge(10, 'tokens', 'full')]);
    await check([charge(9, 'sliding', 's')]);
    const response = await check([charge(2, 'sliding', 's'), refund(6, 'tokens', 'full')]);
    expect({ codes: codes(response), left: left(response) }).toEqual({
      codes: ['OVER_LIMIT', 'OVER_LIMIT', 'OK'],
      left: [1, 6],
    });
    // The denied charge consumed nothing; the refund stands.
    expect(left(await check([charge(0, 'sliding', 's'), charge(0, 'tokens', 'full')]))).toEqual([
      1, 6,
    ]);
  });

  it("settles a request's refunds after its charges, so a reply's charge and refund net out", async () => {
    await start();
    // From an empty counter: the charge lands first, so the refund has something to give back.
    const reply = await check([charge(5, 'tokens', 'net'), refund(3, 'tokens', 'net')]);
    expect({ codes: codes(reply), left: left(reply) }).toEqual({
      codes: ['OK', 'OK', 'OK'],
      left: [5, 8],
    });
    // A charge is judged on what the counter held before the request's refunds: 2 + 9 > 10.
    const denied = await check([refund(2, 'tokens', 'net'), charge(9, 'tokens', 'net')]);
    expect({ codes: codes(denied), left: left(denied) }).toEqual({
      codes: ['OVER_LIMIT', 'OK', 'OVER_LIMIT'],
      left: [10, 8],
    });
  });

  it('gives a sliding window back from its current window only', async () => {
    const clock = (await start()).clock;
    await check([charge(6, 'sliding', 'w')]);
    clock.advance(3_600_000);
    // Last window's 6 weigh 6 at the start of this one.
    await check([charge(2, 'sliding', 'w')]);
    expect(left(await check([refund(5, 'sliding', 'w')]))).toEqual([4]);
  });

  it('fills a token bucket back, never above its burst', async () => {
    await start();
    await check([charge(7, 'bucket', 'b')]);
    expect(left(await check([refund(4, 'bucket', 'b')]))).toEqual([7]);
    expect(left(await check([refund(9, 'bucket', 'b')]))).toEqual([10]);
    expect(left(await check([charge(10, 'bucket', 'b')]))).toEqual([0]);
  });

  it('gives back to a shadow rule and to a limit override, and to nothing unlimited, replaced or unknown', async () => {
    await start();
    await check([charge(6, 'shadow', 's')]);
    expect(left(await check([refund(2, 'shadow', 's')]))).toEqual([6]);

    const override = (hits: number, negative: boolean): Descriptor => ({
      ...spend(hits, negative, 'tokens', 'o'),
      limit: { requests_per_unit: 20, unit: 'MINUTE' },
    });
    await check([override(15, false)]);
    expect(left(await check([override(5, true)]))).toEqual([10]);
    // The rule's own counter is another one.
    expect(left(await check([charge(0, 'tokens', 'o')]))).toEqual([10]);

    const free = await check([refund(3, 'free', 'x')]);
    expect({ codes: codes(free), left: left(free) }).toEqual({
      codes: ['OK', 'OK'],
      left: [4294967295],
    });
    const replaced = await check([refund(3, 'plan', 'p'), charge(1, 'premium', 'p')]);
    expect({ codes: codes(replaced), left: left(replaced) }).toEqual({
      codes: ['OK', 'OK', 'OK'],
      left: [0, 999],
    });
    const unknown = await (tollgate as Tollgate).check({
      domain: 'elsewhere',
      descriptors: [refund(3, 'tokens', 't')],
    });
    expect(codes(unknown)).toEqual(['OK', 'OK']);
  });

  it('keeps no usage of a charge that does not fit a rule without overdraw', async () => {
    await start();
    expect(left(await check([charge(90, 'budget', 'b')]))).toEqual([10]);
    const refused = await check([charge(50, 'budget', 'b')]);
    expect({ code: refused.overall_code, left: left(refused) }).toEqual({
      code: 'OVER_LIMIT',
      left: [10],
    });
    expect(codes(await check([charge(0, 'budget', 'b')]))).toEqual(['OK', 'OK']);
  });

  it.each(['usage', 'usage_sliding'])(
    '%s: records an overdraw in full past the limit, peeks say so, and refunds give back only what was counted',
    async (key) => {
      await start();
      expect(left(await check([charge(90, key, 'u')]))).toEqual([10]);
      const over = await check([charge(50, key, 'u')]);
      expect({ code: over.overall_code, left: left(over) }).toEqual({
        code: 'OVER_LIMIT',
        left: [0],
      });
      // 140 of 100.
      expect(codes(await check([charge(0, key, 'u')]))).toEqual(['OVER_LIMIT', 'OVER_LIMIT']);
      expect(left(await check([refund(30, key, 'u')]))).toEqual([0]);
      expect(codes(await check([charge(0, key, 'u')]))).toEqual(['OVER_LIMIT', 'OVER_LIMIT']);
      expect(left(await check([refund(20, key, 'u')]))).toEqual([10]);
      expect(codes(await check([charge(10, key, 'u')]))).toEqual(['OK', 'OK']);
    },
  );

  it('charges and gives back costs past 2^32 exactly', async () => {
    await start();
    const big = 2 ** 40 + 7;
    expect(left(await check([charge(30, 'usage', 'big')]))).toEqual([70]);
    expect(codes(await check([charge(big, 'usage', 'big')]))).toEqual(['OVER_LIMIT', 'OVER_LIMIT']);
    // 2^40 + 37 counted: giving back all but 40 leaves 40 counted, 60 left.
    expect(left(await check([refund(2 ** 40 - 3, 'usage', 'big')]))).toEqual([60]);
    expect(left(await check([refund(2 ** 53 - 1, 'usage', 'big')]))).toEqual([100]);
  });

  it('reports 4294967294 left at most for a limit of 4294967295, never unlimited', async () => {
    await start();
    const response = await check([charge(0, 'huge', 'h')]);
    expect(response.statuses?.[0]).toMatchObject({
      code: 'OK',
      limit_remaining: 4294967294,
      current_limit: { requests_per_unit: 4294967295 },
    });
  });

  it('sends a token bucket into debt by an overdraw, at most one burst deep', async () => {
    const clock = (await start()).clock;
    expect(left(await check([charge(80, 'usage_bucket', 'u')]))).toEqual([20]);
    // 20 - 50: 30 tokens owed; a peek is denied until 31 tokens have refilled (100 an hour).
    const over = await check([charge(50, 'usage_bucket', 'u')]);
    expect(over.overall_code).toBe('OVER_LIMIT');
    const peek = await check([charge(0, 'usage_bucket', 'u')]);
    expect({ code: peek.overall_code, left: left(peek) }).toEqual({
      code: 'OVER_LIMIT',
      left: [0],
    });
    expect(resetOf(peek)).toBe(31 * 36_000);
    expect(left(await check([refund(40, 'usage_bucket', 'u')]))).toEqual([10]);
    // 10 - 1,000 owes one burst at most: full again after two bursts' refill, 2 hours.
    await check([charge(1_000, 'usage_bucket', 'u')]);
    clock.advance(2 * 3_600_000 - 36_000);
    expect(left(await check([charge(0, 'usage_bucket', 'u')]))).toEqual([99]);
    clock.advance(36_000);
    expect(left(await check([charge(0, 'usage_bucket', 'u')]))).toEqual([100]);
  });

  it('takes a refunded counter out of the over-limit cache', async () => {
    await start({ OVER_LIMIT_CACHE_SIZE: '100' });
    await check([charge(10, 'tokens', 'cached')]);
    // Denied twice: the second from the cache.
    expect(codes(await check([charge(1, 'tokens', 'cached')]))).toEqual([
      'OVER_LIMIT',
      'OVER_LIMIT',
    ]);
    expect(codes(await check([charge(1, 'tokens', 'cached')]))).toEqual([
      'OVER_LIMIT',
      'OVER_LIMIT',
    ]);
    // A refund in the same request as a cached denial still lands.
    const both = await check([charge(1, 'tokens', 'cached'), refund(1, 'tokens', 'other')]);
    expect(codes(both)).toEqual(['OVER_LIMIT', 'OVER_LIMIT', 'OK']);
    expect(left(await check([refund(2, 'tokens', 'cached')]))).toEqual([2]);
    expect(codes(await check([charge(1, 'tokens', 'cached')]))).toEqual(['OK', 'OK']);
  });

  it('takes a refunded counter out of the local cache (COMPAT_MODE=reference)', async () => {
    await start({ COMPAT_MODE: 'reference', LOCAL_CACHE_SIZE_IN_BYTES: '1000000' });
    await check([charge(10, 'tokens', 'local')]);
    expect(codes(await check([charge(1, 'tokens', 'local')]))).toEqual([
      'OVER_LIMIT',
      'OVER_LIMIT',
    ]);
    // The reference's count passed the limit: 11. A refund of 3 leaves 8, 2 left.
    expect(left(await check([refund(3, 'tokens', 'local')]))).toEqual([2]);
    expect(codes(await check([charge(1, 'tokens', 'local')]))).toEqual(['OK', 'OK']);
  });

  it('counts refunds as total_negative_hits, and in no other series', async () => {
    const tollgate = await start();
    await check([charge(4, 'tokens', 'm')]);
    await check([refund(3, 'tokens', 'm')]);
    await check([refund(2, 'tokens', 'm')]);
    const text = await (await fetch(`${tollgate.httpUrl}/metrics`)).text();
    const labels = { domain: 'budgets', key1: 'tokens', key2: '' };
    const value = (name: string) =>
      metricValue(text, `ratelimit_service_rate_limit_${name}`, labels);
    expect(value('total_negative_hits')).toBe(5);
    expect(value('total_hits')).toBe(4);
    expect(value('within_limit')).toBe(4);
  });
});

describe('refunds on Redis', () => {
  let tollgate: Tollgate | undefined;
  afterEach(async () => {
    await tollgate?.stop();
    tollgate = undefined;
  });

  it('creates no key for a counter that does not exist, nor for a window that has rolled over', async () => {
    await redis.client.flushall();
    tollgate = await startTollgate({ rules: RULES, redisUrl: redis.url });
    const counterKeys = async () =>
      (await redis.client.keys('*')).filter((key) => !/tg:\{probe/.test(key));
    for (const key of ['tokens', 'sliding', 'bucket']) {
      const response = await tollgate.check({
        domain: 'budgets',
        descriptors: [refund(3, key, 'never')],
      });
      expect(left(response)).toEqual([10]);
    }
    expect(await counterKeys()).toEqual([]);
    await tollgate.check({ domain: 'budgets', descriptors: [charge(4, 'tokens', 'old')] });
    const [key] = await counterKeys();
    const before = await redis.client.hgetall(key as string);
    tollgate.clock.advance(3_600_000);
    await tollgate.check({ domain: 'budgets', descriptors: [refund(3, 'tokens', 'old')] });
    expect(await redis.client.hgetall(key as string)).toEqual(before);
  });
});

describe('refunds through /json and the client package', () => {
  let tollgate: Tollgate;
  beforeAll(async () => {
    tollgate = await startTollgate({ rules: RULES });
  });
  afterAll(async () => {
    await tollgate?.stop();
  });

  it('takes isNegativeHits and is_negative_hits in /json', async () => {
    const post = async (body: unknown) => {
      const response = await fetch(`${tollgate.httpUrl}/json`, {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify(body),
      });
      return (await response.json()) as {
        overallCode: string;
        statuses: { limitRemaining: number }[];
      };
    };
    const entries = [{ key: 'tokens', value: 'json' }];
    await post({ domain: 'budgets', descriptors: [{ entries, hitsAddend: '9' }] });
    const camel = await post({
      domain: 'budgets',
      descriptors: [{ entries, hitsAddend: '4', isNegativeHits: true }],
    });
    expect(camel.statuses[0]?.limitRemaining).toBe(5);
    const snake = await post({
      domain: 'budgets',
      descriptors: [{ entries, hits_addend: '2', is_negative_hits: true }],
    });
    expect(snake).toMatchObject({ overallCode: 'OK', statuses: [{ limitRemaining: 7 }] });
  });

  it('sends a descriptor with its own cost and isNegativeHits from the client', async () => {
    const client = createTollgateClient({
      address: tollgate.address,
      deadlineMs: 5_000,
      whenUnavailable: 'throw',
    });
    try {
      const entries = { tokens: 'client' };
      await client.check({ domain: 'budgets', descriptors: [{ entries, hitsAddend: 9 }] });
      const result = await client.check({
        domain: 'budgets',
        descriptors: [{ entries, hitsAddend: 6, isNegativeHits: true }, { tokens: 'other' }],
      });
      expect(result).toMatchObject({
        allowed: true,
        statuses: [
          { code: 'OK', limitRemaining: 7 },
          { code: 'OK', limitRemaining: 9 },
        ],
      });
    } finally {
      client.close();
    }
  });
});
