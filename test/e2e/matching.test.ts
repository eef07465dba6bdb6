// Which rule a descriptor lands on, as a caller sees it through ShouldRateLimit: exact beats
// wildcard beats bare key, nested rules, unlimited and unmatched descriptors, limit overrides,
// unknown domains and what current_limit reports. Each case runs on the in-memory store and Redis.
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import type { RateLimitResponseObject } from '@tollgate/client';
import { startRedis, type TestRedis } from '../support/redis.js';
import {
  codes,
  d,
  isProbeKey,
  resetMs,
  startTollgate,
  type Tollgate,
} from '../support/tollgate.js';

const RULES = `
domain: api
descriptors:
  - key: tenant
    value: acme
    rate_limit: {name: exact, unit: minute, requests_per_unit: 1}
  - key: tenant
    value: ac*
    rate_limit: {name: prefix, unit: minute, requests_per_unit: 2}
  - key: tenant
    value: '*-corp'
    rate_limit: {name: suffix, unit: minute, requests_per_unit: 3}
  - key: tenant
    value: m*e
    rate_limit: {name: middle, unit: minute, requests_per_unit: 4}
  - key: tenant
    value: acme-co*
    rate_limit: {name: later-and-longer, unit: minute, requests_per_unit: 5}
  - key: tenant
    rate_limit: {name: bare, unit: minute, requests_per_unit: 6}
  - key: org
    value: nest
    descriptors:
      - key: route
        value: /orders
        rate_limit: {name: nested, unit: minute, requests_per_unit: 2}
  - key: internal
    rate_limit: {unlimited: true}
  - key: bucket
    rate_limit: {name: tb, unit: minute, requests_per_unit: 60, algorithm: token_bucket}
  - key: shared
    rate_limit: {name: fw, unit: minute, requests_per_unit: 10, algorithm: fixed_window}
  - key: half
    rate_limit: {name: half, window: 30s, requests_per_unit: 4}
  - key: anon
    rate_limit: {window: 30s, requests_per_unit: 4}
  - key: cased
    rate_limit: {unit: Minute, requests_per_unit: 7}
`;

type Status = NonNullable<RateLimitResponseObject['statuses']>[number];
const statusOf = (response: RateLimitResponseObject, i = 0): Status => response.statuses?.[i] ?? {};
const noLimit = { code: 'OK', limit_remaining: 0 };

let redis: TestRedis;
beforeAll(async () => {
  redis = await startRedis();
});
afterAll(async () => {
  await redis?.stop();
});

const STORES = [{ name: 'memory' }, { name: 'redis' }];
describe.each(STORES)('matching on the $name store', ({ name }) => {
  let tollgate: Tollgate | undefined;
  afterEach(async () => {
    await tollgate?.stop();
    tollgate = undefined;
  });
  async function start(rules = RULES): Promise<Tollgate> {
    if (name === 'redis') await redis.client.flushall();
    tollgate = await startTollgate({
      rules,
      ...(name === 'redis' ? { redisUrl: redis.url } : {}),
    });
    return tollgate;
  }
  const dbsize = async () =>
    name === 'redis' ? (await redis.client.keys('*')).filter((key) => !isProbeKey(key)).length : 0;
  const ruleName = async (t: Tollgate, ...entries: string[]) =>
    statusOf(await t.check({ domain: 'api', descriptors: [d(...entries)] })).current_limit?.name;

  it('prefers an exact value, then the first wildcard in file order, then the bare key', async () => {
    const t = await start();
    expect(await ruleName(t, 'tenant', 'acme')).toBe('exact');
    expect(await ruleName(t, 'tenant', 'acorn')).toBe('prefix');
    expect(await ruleName(t, 'tenant', 'big-corp')).toBe('suffix');
    expect(await ruleName(t, 'tenant', 'make')).toBe('middle');
    expect(await ruleName(t, 'tenant', 'me')).toBe('middle'); // '*' matches nothing too
    // Matches ac*, *-corp and acme-co*: the first in the file wins, not the longest.
    expect(await ruleName(t, 'tenant', 'acme-corp')).toBe('prefix');
    expect(await ruleName(t, 'tenant', 'zeta')).toBe('bare');
  });

  it('reaches a nested rule; deeper or shallower requests get no limit', async () => {
    const t = await start();
    const nested = { domain: 'api', descriptors: [d('org', 'nest', 'route', '/orders')] };
    const first = await t.check(nested);
    expect(statusOf(first)).toMatchObject({
      code: 'OK',
      current_limit: { name: 'nested', requests_per_unit: 2, unit: 'MINUTE' },
      limit_remaining: 1,
    });
    expect(codes(await t.check(nested))).toEqual(['OK', 'OK']);
    expect(codes(await t.check(nested))).toEqual(['OVER_LIMIT', 'OVER_LIMIT']);

    const shallow = d('org', 'nest');
    const deeper = d('org', 'nest', 'route', '/orders', 'method', 'GET');
    const pastLeaf = d('tenant', 'acme', 'route', '/x');
    const other = d('org', 'nest', 'route', '/other');
    const response = await t.check({
      domain: 'api',
      descriptors: [shallow, deeper, pastLeaf, other],
    });
    expect(response.overall_code).toBe('OK');
    for (const status of response.statuses ?? []) {
      expect(status).toMatchObject(noLimit);
      expect(status.current_limit).toBeUndefined();
    }
  });

  it('answers an unlimited rule with the maximum remaining and touches no counter', async () => {
    const t = await start();
    for (let i = 0; i < 3; i++) {
      const status = statusOf(await t.check({ domain: 'api', descriptors: [d('internal', 'x')] }));
      expect(status).toMatchObject({ code: 'OK', limit_remaining: 4294967295 });
      expect(status.current_limit).toBeUndefined();
    }
    expect(await dbsize()).toBe(0);
  });

  it('answers a descriptor that matches no rule with OK and no limit', async () => {
    const t = await start();
    const status = statusOf(await t.check({ domain: 'api', descriptors: [d('nobody', 'x')] }));
    expect(status).toMatchObject(noLimit);
    expect(status.current_limit).toBeUndefined();
  });

  it('applies a limit override in a configured domain without a matching rule', async () => {
    const t = await start();
    const request = {
      domain: 'api',
      descriptors: [{ ...d('nobody', 'x'), limit: { requests_per_unit: 2, unit: 'MINUTE' } }],
    };
    const first = statusOf(await t.check(request));
    expect(first).toMatchObject({
      code: 'OK',
      current_limit: { requests_per_unit: 2, unit: 'MINUTE' },
      limit_remaining: 1,
    });
    // The default algorithm, a sliding window, resets two windows after a count lands.
    expect(resetMs(first)).toBe(120_000);
    expect(codes(await t.check(request))).toEqual(['OK', 'OK']);
    expect(codes(await t.check(request))).toEqual(['OVER_LIMIT', 'OVER_LIMIT']);
  });

  it("uses the matched rule's algorithm for an override", async () => {
    const t = await start();
    const request = {
      domain: 'api',
      descriptors: [{ ...d('bucket', 'x'), limit: { requests_per_unit: 6, unit: 'MINUTE' } }],
    };
    const status = statusOf(await t.check(request));
    expect(status).toMatchObject({
      code: 'OK',
      current_limit: { name: 'tb', requests_per_unit: 6, unit: 'MINUTE' },
      limit_remaining: 5,
    });
    // A token bucket refilling 6 a minute is full again 10 s after one token was taken.
    expect(resetMs(status)).toBe(10_000);
  });

  it("shares the rule's counter when the window is the same, not when it differs", async () => {
    const t = await start();
    const viaRule = await t.check({
      domain: 'api',
      descriptors: [d('shared', 'x')],
      hits_addend: 3,
    });
    expect(statusOf(viaRule).limit_remaining).toBe(7);
    const override = (unit: string) => ({
      domain: 'api',
      descriptors: [{ ...d('shared', 'x'), limit: { requests_per_unit: 5, unit } }],
    });
    // Same one-minute window: 3 counted by the rule, 1 now, so 1 of 5 is left.
    expect(statusOf(await t.check(override('MINUTE')))).toMatchObject({
      code: 'OK',
      current_limit: { name: 'fw', requests_per_unit: 5, unit: 'MINUTE' },
      limit_remaining: 1,
    });
    // An hour is another counter: only this request counts.
    expect(statusOf(await t.check(override('HOUR'))).limit_remaining).toBe(4);
    // And the rule's own counter saw the same-window override: 10 - 3 - 1 - 1.
    const again = await t.check({ domain: 'api', descriptors: [d('shared', 'x')] });
    expect(statusOf(again).limit_remaining).toBe(5);
  });

  it('answers every descriptor of an unknown domain OK with no limit, touching no counter', async () => {
    const t = await start();
    const response = await t.check({
      domain: 'nowhere',
      descriptors: [
        d('tenant', 'acme'),
        { ...d('tenant', 'x'), limit: { requests_per_unit: 1, unit: 'SECOND' } },
      ],
      hits_addend: 100,
    });
    expect(response.overall_code).toBe('OK');
    expect(response.statuses).toHaveLength(2);
    for (const status of response.statuses ?? []) {
      expect(status).toMatchObject(noLimit);
      expect(status.current_limit).toBeUndefined();
    }
    expect(await dbsize()).toBe(0);
  });

  it('reports the rule in current_limit, with a window that is not a unit in the name', async () => {
    const t = await start();
    const response = await t.check({
      domain: 'api',
      descriptors: [d('tenant', 'acme'), d('half', 'x'), d('anon', 'x'), d('cased', 'x')],
    });
    expect(response.statuses?.map((s) => s.current_limit)).toEqual([
      { name: 'exact', requests_per_unit: 1, unit: 'MINUTE' },
      { name: 'half, window=30s', requests_per_unit: 4, unit: 'UNKNOWN' },
      { name: 'window=30s', requests_per_unit: 4, unit: 'UNKNOWN' },
      { name: '', requests_per_unit: 7, unit: 'MINUTE' }, // 'Minute' in the rules file
    ]);
  });

  it('keeps apart the counters of two rules whose entries come in another order', async () => {
    const t = await start(`
domain: api
tenant_key: tenant
descriptors:
  - key: tenant
    descriptors:
      - key: route
        rate_limit: {name: tenant-route, unit: minute, requests_per_unit: 2}
  - key: route
    descriptors:
      - key: tenant
        rate_limit: {name: route-tenant, unit: minute, requests_per_unit: 2}
`);
    const tenantFirst = { domain: 'api', descriptors: [d('tenant', 'acme', 'route', '/x')] };
    const routeFirst = { domain: 'api', descriptors: [d('route', '/x', 'tenant', 'acme')] };
    expect(statusOf(await t.check(tenantFirst)).limit_remaining).toBe(1);
    expect(statusOf(await t.check(tenantFirst)).limit_remaining).toBe(0);
    // Another rule, so another counter: its first request leaves 1 of 2.
    const other = statusOf(await t.check(routeFirst));
    expect(other).toMatchObject({ code: 'OK', current_limit: { name: 'route-tenant' } });
    expect(other.limit_remaining).toBe(1);
  });
});
