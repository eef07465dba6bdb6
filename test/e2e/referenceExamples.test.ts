// The examples of envoyproxy/ratelimit's README (Configuration > Examples 1-9), rewritten as
// fixtures in test/fixtures/rules/reference, plus one each for value_to_metric, share_threshold,
// quota_mode and tollgate's overdraw. Each loads into the real service (in-memory store, fixed
// windows as in the reference, a clock that never moves) and is checked against what the README
// says the service decides.
import { readFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { afterEach, describe, expect, it } from 'vitest';
import type { RateLimitRequestObject, RateLimitResponseObject } from '@tollgate/client';
import { codes, d, startTollgate, type Tollgate } from '../support/tollgate.js';

type Descriptor = NonNullable<RateLimitRequestObject['descriptors']>[number];
type Status = NonNullable<RateLimitResponseObject['statuses']>[number];

const REFERENCE = fileURLToPath(new URL('../fixtures/rules/reference/', import.meta.url));
const UINT32_MAX = 4_294_967_295;

let tollgate: Tollgate | undefined;
afterEach(async () => {
  await tollgate?.stop();
  tollgate = undefined;
});

interface Example {
  check(descriptors: Descriptor[], hits?: number): Promise<RateLimitResponseObject>;
  /** Sends the same request `times` times, one after another; resolves with every response. */
  repeat(times: number, descriptors: Descriptor[]): Promise<RateLimitResponseObject[]>;
}

/** The service with one reference fixture loaded; its clock stays inside one window. */
async function start(example: string): Promise<Example> {
  const rules = readFileSync(`${REFERENCE}${example}.yaml`, 'utf8');
  const domain = /^domain: (\S+)$/m.exec(rules)?.[1];
  if (domain === undefined) throw new Error(`${example}.yaml has no domain line`);
  const t = await startTollgate({ rules, env: { DEFAULT_ALGORITHM: 'fixed_window' } });
  tollgate = t;
  const check = (descriptors: Descriptor[], hits?: number) =>
    t.check({ domain, descriptors, ...(hits === undefined ? {} : { hits_addend: hits }) });
  return {
    check,
    async repeat(times, descriptors) {
      const responses: RateLimitResponseObject[] = [];
      for (let i = 0; i < times; i++) responses.push(await check(descriptors));
      return responses;
    },
  };
}

const statusAt = (response: RateLimitResponseObject, i = 0): Status => response.statuses?.[i] ?? {};
const overall = (responses: RateLimitResponseObject[]) => responses.map((r) => r.overall_code);
const remaining = (response: RateLimitResponseObject) =>
  (response.statuses ?? []).map((s) => s.limit_remaining);
const all = (n: number, code: string) => Array.from({ length: n }, () => code);

describe('reference README examples', () => {
  it('1: each database value allows 500 a second, then denies the 501st', async () => {
    const c = await start('example1');
    const users = [d('database', 'users')];
    expect(overall(await c.repeat(500, users))).toEqual(all(500, 'OK'));
    const over = await c.check(users);
    expect(codes(over)).toEqual(['OVER_LIMIT', 'OVER_LIMIT']);
    expect(statusAt(over).current_limit).toMatchObject({ requests_per_unit: 500, unit: 'SECOND' });
    // The other value has a budget of its own.
    const other = await c.check([d('database', 'default')]);
    expect(codes(other)).toEqual(['OK', 'OK']);
    expect(statusAt(other).limit_remaining).toBe(499);
  });

  it('2: a marketing message counts on both rules; 5 a day per number, then denied', async () => {
    const c = await start('example2');
    const both = [
      d('message_type', 'marketing', 'to_number', '2061111111'),
      d('to_number', '2061111111'),
    ];
    const five = await c.repeat(5, both);
    expect(overall(five)).toEqual(all(5, 'OK'));
    expect(five.map(remaining)).toEqual([
      [4, 99],
      [3, 98],
      [2, 97],
      [1, 96],
      [0, 95],
    ]);
    const sixth = await c.check(both);
    expect(codes(sixth)).toEqual(['OVER_LIMIT', 'OVER_LIMIT', 'OK']);
    // All or nothing: the denied request took nothing from the per-number rule either.
    expect(remaining(sixth)).toEqual([0, 95]);
    expect(remaining(await c.check([d('to_number', '2061111111')]))).toEqual([94]);
    // Another number has its own 5 marketing messages.
    const other = await c.check([d('message_type', 'marketing', 'to_number', '2062222222')]);
    expect(codes(other)).toEqual(['OK', 'OK']);
    expect(remaining(other)).toEqual([4]);
  });

  it('3: the listed address is denied at once; any other gets 10 a second', async () => {
    const c = await start('example3');
    const blocked = await c.check([d('remote_address', '50.0.0.5')]);
    expect(codes(blocked)).toEqual(['OVER_LIMIT', 'OVER_LIMIT']);
    expect(statusAt(blocked).current_limit).toMatchObject({ requests_per_unit: 0 });
    const address = [d('remote_address', '50.0.0.1')];
    expect(overall(await c.repeat(10, address))).toEqual(all(10, 'OK'));
    expect(codes(await c.check(address))).toEqual(['OVER_LIMIT', 'OVER_LIMIT']);
    expect(codes(await c.check([d('remote_address', '50.0.0.2')]))).toEqual(['OK', 'OK']);
  });

  it('4: only a request exactly as deep as the rule matches it', async () => {
    const c = await start('example4');
    const exact = await c.check([d('key', 'value', 'subkey', 'subvalue')]);
    expect(statusAt(exact)).toMatchObject({
      code: 'OK',
      current_limit: { requests_per_unit: 300, unit: 'SECOND' },
      limit_remaining: 299,
    });
    const unmatched = await c.check([
      d('key', 'value'),
      d('key', 'value', 'subkey', 'subvalue', 'extra', 'x'),
      d('key', 'other', 'subkey', 'subvalue'),
    ]);
    expect(codes(unmatched)).toEqual(['OK', 'OK', 'OK', 'OK']);
    for (const status of unmatched.statuses ?? []) expect(status.current_limit).toBeFalsy();
    // The rest of the 300 a second is there for the matching request, and no more.
    const request = [d('key', 'value', 'subkey', 'subvalue')];
    expect(remaining(await c.check(request, 299))).toEqual([0]);
    expect(codes(await c.check(request))).toEqual(['OVER_LIMIT', 'OVER_LIMIT']);
  });

  it('5: an unlimited rule answers the maximum remaining and no limit; azure gets 100', async () => {
    const c = await start('example5');
    for (const response of await c.repeat(20, [d('ldap', 'any')])) {
      expect(codes(response)).toEqual(['OK', 'OK']);
      expect(statusAt(response).limit_remaining).toBe(UINT32_MAX);
      expect(statusAt(response).current_limit).toBeFalsy();
    }
    const azure = [d('azure', 'tenant-1')];
    expect(overall(await c.repeat(100, azure))).toEqual(all(100, 'OK'));
    expect(codes(await c.check(azure))).toEqual(['OVER_LIMIT', 'OVER_LIMIT']);
  });

  it('6: the shadow-mode user is never denied; the other is denied on the 21st', async () => {
    const c = await start('example6');
    const userA = [d('service', 'auth-service', 'user', 'user-a')];
    for (const response of await c.repeat(15, userA)) {
      expect(codes(response)).toEqual(['OK', 'OK']);
    }
    const userB = [d('service', 'auth-service', 'user', 'user-b')];
    expect(overall(await c.repeat(20, userB))).toEqual(all(20, 'OK'));
    expect(codes(await c.check(userB))).toEqual(['OVER_LIMIT', 'OVER_LIMIT']);
  });

  it('6: a shadow rule over its limit does not block the rest of the request', async () => {
    const c = await start('example6');
    const userA = d('service', 'auth-service', 'user', 'user-a');
    await c.repeat(10, [userA]);
    const mixed = await c.check([userA, d('service', 'auth-service', 'user', 'user-b')]);
    expect(codes(mixed)).toEqual(['OK', 'OK', 'OK']);
    expect(statusAt(mixed, 1).limit_remaining).toBe(19);
  });

  it('7: with both rules matched, the replacing 10 a second applies and the 5 is untouched', async () => {
    const c = await start('example7');
    const replaced = d('key_1', 'value_1', 'user', 'bkthomps');
    const replacing = d('key_2', 'value_2', 'user', 'bkthomps');
    const ten = await c.repeat(10, [replaced, replacing]);
    expect(overall(ten)).toEqual(all(10, 'OK'));
    for (const response of ten) {
      // The replaced limit is neither checked nor consumed: OK, with no current_limit.
      expect(statusAt(response, 0).code).toBe('OK');
      expect(statusAt(response, 0).current_limit).toBeFalsy();
      expect(statusAt(response, 1).current_limit).toMatchObject({ requests_per_unit: 10 });
    }
    expect(ten.map((r) => statusAt(r, 1).limit_remaining)).toEqual([9, 8, 7, 6, 5, 4, 3, 2, 1, 0]);
    const eleventh = await c.check([replaced, replacing]);
    expect(codes(eleventh)).toEqual(['OVER_LIMIT', 'OK', 'OVER_LIMIT']);
    // Alone, the first rule still has its whole 5 a second.
    expect(overall(await c.repeat(5, [replaced]))).toEqual(all(5, 'OK'));
    expect(codes(await c.check([replaced]))).toEqual(['OVER_LIMIT', 'OVER_LIMIT']);
  });

  it('7: an unlimited rule may replace a limit too', async () => {
    const c = await start('unlimited_replaces');
    const user = d('user', 'u1');
    const both = await c.repeat(5, [user, d('internal_route', '/health')]);
    for (const response of both) {
      expect(codes(response)).toEqual(['OK', 'OK', 'OK']);
      expect(statusAt(response, 0).current_limit).toBeFalsy();
      expect(statusAt(response, 1).limit_remaining).toBe(UINT32_MAX);
    }
    expect(overall(await c.repeat(2, [user]))).toEqual(all(2, 'OK'));
    expect(codes(await c.check([user]))).toEqual(['OVER_LIMIT', 'OVER_LIMIT']);
  });

  it('8: detailed_metric changes metrics only; every value of the bare key counts alone', async () => {
    const c = await start('example8');
    for (const value of ['unspecified_value', 'unspecified_value2']) {
      const request = [d('key1', value)];
      expect(overall(await c.repeat(10, request))).toEqual(all(10, 'OK'));
      expect(codes(await c.check(request))).toEqual(['OVER_LIMIT', 'OVER_LIMIT']);
    }
    const value1 = [d('key1', 'value1')];
    expect(overall(await c.repeat(20, value1))).toEqual(all(20, 'OK'));
    expect(codes(await c.check(value1))).toEqual(['OVER_LIMIT', 'OVER_LIMIT']);
  });

  it('9: each value matching the wildcard gets 20 a minute of its own', async () => {
    const c = await start('example9');
    for (const value of ['value1', 'value2']) {
      const request = [d('key1', value)];
      expect(overall(await c.repeat(20, request))).toEqual(all(20, 'OK'));
      expect(codes(await c.check(request))).toEqual(['OVER_LIMIT', 'OVER_LIMIT']);
    }
    const other = await c.check([d('key1', 'other')]);
    expect(codes(other)).toEqual(['OK', 'OK']);
    expect(statusAt(other).current_limit).toBeFalsy();
  });
});

describe('the other reference keys, and overdraw', () => {
  it('value_to_metric changes metrics only; each route has its own counter', async () => {
    const c = await start('value_to_metric');
    for (const route of ['/a', '/b']) {
      const request = [d('route', route, 'method', 'GET')];
      expect(overall(await c.repeat(5, request))).toEqual(all(5, 'OK'));
      expect(codes(await c.check(request))).toEqual(['OVER_LIMIT', 'OVER_LIMIT']);
    }
    const post = await c.check([d('route', '/a', 'method', 'POST')]);
    expect(statusAt(post).current_limit).toBeFalsy();
  });

  it('share_threshold: every value under files/ draws on one counter', async () => {
    const c = await start('share_threshold');
    expect(overall(await c.repeat(6, [d('path', 'files/a')]))).toEqual(all(6, 'OK'));
    expect(overall(await c.repeat(4, [d('path', 'files/b')]))).toEqual(all(4, 'OK'));
    expect(codes(await c.check([d('path', 'files/c')]))).toEqual(['OVER_LIMIT', 'OVER_LIMIT']);
    expect(codes(await c.check([d('path', 'files/a')]))).toEqual(['OVER_LIMIT', 'OVER_LIMIT']);
  });

  it('without share_threshold, every value under docs/ has a counter of its own', async () => {
    const c = await start('share_threshold');
    for (const path of ['docs/a', 'docs/b']) {
      expect(overall(await c.repeat(10, [d('path', path)]))).toEqual(all(10, 'OK'));
    }
    expect(codes(await c.check([d('path', 'docs/a')]))).toEqual(['OVER_LIMIT', 'OVER_LIMIT']);
  });

  it('quota_mode: one spent pool does not deny; every pool spent does, consuming nothing', async () => {
    const c = await start('quota_mode');
    const request = [d('pool', 'small'), d('pool', 'large'), d('user', 'u1')];
    const three = await c.repeat(3, request);
    expect(overall(three)).toEqual(all(3, 'OK'));
    expect(remaining(three[2] ?? {})).toEqual([0, 2, 5]);
    // The small pool is spent, the large one still fits: allowed, and only what fits is consumed.
    const fourth = await c.check(request);
    expect(fourth.overall_code).toBe('OK');
    expect(remaining(fourth).slice(1)).toEqual([1, 4]);
    expect(statusAt(fourth, 1).code).toBe('OK');
    expect(statusAt(fourth, 2).code).toBe('OK');
    expect((await c.check(request)).overall_code).toBe('OK');
    // Both pools spent: denied, and the enforced limit keeps its count.
    const sixth = await c.check(request);
    expect(sixth.overall_code).toBe('OVER_LIMIT');
    expect(statusAt(sixth, 2)).toMatchObject({ code: 'OK', limit_remaining: 3 });
  });

  it('quota_mode: a spent enforced limit denies even when a pool fits', async () => {
    const c = await start('quota_mode');
    expect((await c.check([d('user', 'u2')], 8)).overall_code).toBe('OK');
    const denied = await c.check([d('pool', 'large'), d('user', 'u2')]);
    expect(codes(denied)).toEqual(['OVER_LIMIT', 'OK', 'OVER_LIMIT']);
    // Nothing was consumed from the pool.
    expect(statusAt(denied, 0).limit_remaining).toBe(5);
  });

  it('overdraw: a late cost larger than what is left is recorded in full', async () => {
    const c = await start('overdraw');
    const tokens = [d('tokens', 'reply')];
    expect(remaining(await c.check(tokens, 60))).toEqual([40]);
    const overdrawn = await c.check(tokens, 60);
    expect(statusAt(overdrawn).limit_remaining).toBe(0);
    // 120 of 100: one more does not fit, and lands too (121); a refund of 31 leaves 90.
    expect(codes(await c.check(tokens))).toEqual(['OVER_LIMIT', 'OVER_LIMIT']);
    const refund = await c.check([{ ...d('tokens', 'reply'), is_negative_hits: true }], 31);
    expect(remaining(refund)).toEqual([10]);
    expect(codes(await c.check(tokens, 10))).toEqual(['OK', 'OK']);
  });

  it('without overdraw, a cost larger than what is left records nothing', async () => {
    const c = await start('overdraw');
    const plain = [d('plain', 'reply')];
    expect(remaining(await c.check(plain, 60))).toEqual([40]);
    const refused = await c.check(plain, 60);
    expect(codes(refused)).toEqual(['OVER_LIMIT', 'OVER_LIMIT']);
    expect(remaining(refused)).toEqual([40]);
    expect(codes(await c.check(plain, 40))).toEqual(['OK', 'OK']);
  });
});
