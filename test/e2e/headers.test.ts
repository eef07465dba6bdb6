import { afterEach, describe, expect, it } from 'vitest';
import type { RateLimitResponseObject } from '@tollgate/client';
import { codes, d, resetMs, startTollgate, type Tollgate } from '../support/tollgate.js';

// The headers Envoy adds to the downstream response: the IETF RateLimit-Policy and RateLimit
// fields for the enforced descriptor with the smallest remaining, Retry-After on OVER_LIMIT (the
// exact reset rounded up), and the reference's trio when enabled. The clock starts on a minute.

const RULES = `
domain: h
descriptors:
  - key: fixed
    rate_limit: {name: fixed, unit: minute, requests_per_unit: 10, algorithm: fixed_window}
  - key: sliding
    rate_limit: {name: sliding, unit: minute, requests_per_unit: 10, algorithm: sliding_window}
  - key: bucket
    rate_limit: {name: bucket, unit: minute, requests_per_unit: 10, algorithm: token_bucket, burst: 5}
  - key: tight
    rate_limit: {name: tight, unit: hour, requests_per_unit: 2, algorithm: fixed_window}
  - key: soft
    shadow_mode: true
    rate_limit: {name: soft, unit: second, requests_per_unit: 1, algorithm: fixed_window}
  - key: unnamed
    rate_limit: {unit: second, requests_per_unit: 3, algorithm: fixed_window}
  - key: pool_a
    quota_mode: true
    rate_limit: {name: pool_a, unit: minute, requests_per_unit: 1, algorithm: fixed_window}
  - key: pool_b
    quota_mode: true
    rate_limit: {name: pool_b, unit: hour, requests_per_unit: 1, algorithm: fixed_window}
`;

let tollgate: Tollgate | undefined;
afterEach(async () => {
  await tollgate?.stop();
  tollgate = undefined;
});

function headers(response: RateLimitResponseObject): Record<string, string> {
  return Object.fromEntries((response.response_headers_to_add ?? []).map((h) => [h.key, h.value]));
}

async function start(env: Record<string, string> = {}) {
  tollgate = await startTollgate({ rules: RULES, env });
  return tollgate;
}
const hit = (...descriptors: ReturnType<typeof d>[]) =>
  tollgate!.check({ domain: 'h', descriptors });

describe('IETF RateLimit headers', () => {
  it('fixed window: the quota over its window, and the seconds left in it', async () => {
    await start();
    tollgate!.clock.advance(15_000);
    expect(headers(await hit(d('fixed', 'a')))).toEqual({
      'RateLimit-Policy': '"fixed";q=10;w=60',
      RateLimit: '"fixed";r=9;t=45',
    });
  });

  it('sliding window: allowed, the reset is 2W - e', async () => {
    await start();
    tollgate!.clock.advance(15_000);
    expect(headers(await hit(d('sliding', 'a')))).toEqual({
      'RateLimit-Policy': '"sliding";q=10;w=60',
      RateLimit: '"sliding";r=9;t=105',
    });
  });

  it('token bucket: the burst over the time to fill it, and the time until full', async () => {
    await start();
    // 10 a minute refills one token every 6 s; a burst of 5 fills in 30 s.
    expect(headers(await hit(d('bucket', 'a')))).toEqual({
      'RateLimit-Policy': '"bucket";q=5;w=30',
      RateLimit: '"bucket";r=4;t=6',
    });
  });

  it('describes the descriptor with the smallest remaining, and leaves shadow rules out', async () => {
    await start();
    const response = await hit(d('fixed', 'a'), d('tight', 'a'), d('soft', 'a'), d('soft', 'a'));
    expect(codes(response)).toEqual(['OK', 'OK', 'OK', 'OK', 'OK']);
    expect(headers(response)).toEqual({
      'RateLimit-Policy': '"tight";q=2;w=3600',
      RateLimit: '"tight";r=1;t=3600',
    });
  });

  it('breaks a tie in remaining by the longer reset', async () => {
    await start();
    for (let i = 0; i < 9; i++) await hit(d('fixed', 'b'));
    await hit(d('tight', 'b'));
    // Both have 1 left after this request: fixed resets in 60 s, tight in 3600 s.
    const response = await hit(d('fixed', 'b'), d('tight', 'c'));
    expect(response.statuses!.map((s) => s.limit_remaining)).toEqual([0, 1]);
    await hit(d('tight', 'b'));
    const tie = await hit(d('unnamed', 'x'), d('unnamed', 'y'));
    expect(headers(tie)['RateLimit-Policy']).toBe('"default";q=3;w=1');
  });

  it('adds Retry-After on OVER_LIMIT: the longest reset of the denying descriptors, rounded up', async () => {
    await start();
    tollgate!.clock.advance(10_250);
    for (let i = 0; i < 2; i++) await hit(d('tight', 'z'));
    for (let i = 0; i < 5; i++) await hit(d('bucket', 'z'));
    const denied = await hit(d('tight', 'z'), d('bucket', 'z'));
    expect(codes(denied)).toEqual(['OVER_LIMIT', 'OVER_LIMIT', 'OVER_LIMIT']);
    const resets = denied.statuses!.map((s) => resetMs(s)!);
    expect(resets).toEqual([3_600_000 - 10_250, 6_000]);
    expect(headers(denied)['Retry-After']).toBe(String(Math.ceil(Math.max(...resets) / 1000)));
    expect(headers(denied)['Retry-After']).toBe('3590');
  });

  it('has no Retry-After when one of the denials can never pass', async () => {
    await start();
    for (let i = 0; i < 2; i++) await hit(d('tight', 'm'));
    const denied = await tollgate!.check({
      domain: 'h',
      descriptors: [d('tight', 'm'), { ...d('fixed', 'm'), hits_addend: { value: '11' } }],
    });
    expect(codes(denied)).toEqual(['OVER_LIMIT', 'OVER_LIMIT', 'OVER_LIMIT']);
    expect(resetMs(denied.statuses![0]!)).toBeGreaterThan(0);
    expect(headers(denied)['Retry-After']).toBeUndefined();
  });

  it('leaves quota descriptors out, and retries when the first quota frees up', async () => {
    await start();
    tollgate!.clock.advance(20_000);
    // pool_a is spent; pool_b still fits, so the request passes and only fixed is described.
    await hit(d('pool_a', 'q'));
    const passing = await hit(d('fixed', 'q'), d('pool_a', 'q'), d('pool_b', 'q'));
    expect(codes(passing)).toEqual(['OK', 'OK', 'OVER_LIMIT', 'OK']);
    expect(headers(passing)).toEqual({
      'RateLimit-Policy': '"fixed";q=10;w=60',
      RateLimit: '"fixed";r=9;t=40',
    });
    // Now both pools are spent: denied until pool_a's minute turns, in 40 s.
    const denied = await hit(d('fixed', 'q'), d('pool_a', 'q'), d('pool_b', 'q'));
    expect(codes(denied)).toEqual(['OVER_LIMIT', 'OK', 'OVER_LIMIT', 'OVER_LIMIT']);
    expect(headers(denied)['Retry-After']).toBe('40');
  });

  it('has no Retry-After when the denial can never pass', async () => {
    await start();
    const denied = await tollgate!.check({
      domain: 'h',
      descriptors: [d('tight', 'n')],
      hits_addend: 3,
    });
    expect(codes(denied)).toEqual(['OVER_LIMIT', 'OVER_LIMIT']);
    expect(headers(denied)['Retry-After']).toBeUndefined();
  });
});

describe("the reference's headers", () => {
  it('adds RateLimit-Limit, -Remaining and -Reset under configurable names', async () => {
    await start({
      LIMIT_RESPONSE_HEADERS_ENABLED: 'true',
      LIMIT_REMAINING_HEADER: 'X-Left',
    });
    tollgate!.clock.advance(15_000);
    expect(headers(await hit(d('fixed', 'r')))).toMatchObject({
      'RateLimit-Limit': '10',
      'X-Left': '9',
      'RateLimit-Reset': '45',
    });
  });
});

describe('global SHADOW_MODE', () => {
  it('decides as always, answers OK, keeps the statuses, consumes nothing on a denial', async () => {
    await start({ SHADOW_MODE: 'true' });
    for (let i = 0; i < 2; i++) await hit(d('tight', 's'));
    const shadowed = await hit(d('fixed', 's'), d('tight', 's'));
    expect(codes(shadowed)).toEqual(['OK', 'OK', 'OVER_LIMIT']);
    expect(headers(shadowed)['Retry-After']).toBeUndefined();
    // All or nothing still held: the fixed counter took nothing from the would-be denial.
    expect((await hit(d('fixed', 's'))).statuses![0]!.limit_remaining).toBe(9);
  });
});

describe('RATELIMIT_HEADERS', () => {
  it('none: no IETF header, and no Retry-After, even when denied', async () => {
    tollgate = await startTollgate({ rules: RULES, env: { RATELIMIT_HEADERS: 'NONE' } });
    const t = tollgate;
    for (let i = 0; i < 2; i++) {
      expect(headers(await t.check({ domain: 'h', descriptors: [d('tight', 'x')] }))).toEqual({});
    }
    const denied = await t.check({ domain: 'h', descriptors: [d('tight', 'x')] });
    expect(codes(denied)).toEqual(['OVER_LIMIT', 'OVER_LIMIT']);
    expect(headers(denied)).toEqual({});
  });

  it("none, with the reference's headers: those alone", async () => {
    tollgate = await startTollgate({
      rules: RULES,
      env: { RATELIMIT_HEADERS: 'none', LIMIT_RESPONSE_HEADERS_ENABLED: 'true' },
    });
    const response = await tollgate.check({ domain: 'h', descriptors: [d('fixed', 'x')] });
    expect(headers(response)).toEqual({
      'RateLimit-Limit': '10',
      'RateLimit-Remaining': '9',
      'RateLimit-Reset': '60',
    });
  });
});
