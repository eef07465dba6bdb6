// What a request costs, as a caller sees it: hits_addend on the request and per descriptor, check-only
// descriptors, costs that can never fit, all-or-nothing decisions across descriptors, and
// descriptors that land on one counter. Each case runs on the in-memory store and on Redis.
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import type { RateLimitRequestObject, RateLimitResponseObject } from '@tollgate/client';
import { startRedis, type TestRedis } from '../support/redis.js';
import { codes, d, resetMs, startTollgate, type Tollgate } from '../support/tollgate.js';

const RULES = `
domain: costs
descriptors:
  - key: five
    rate_limit: {unit: minute, requests_per_unit: 5}
  - key: three
    rate_limit: {unit: minute, requests_per_unit: 3, algorithm: fixed_window}
  - key: bucket
    rate_limit: {unit: minute, requests_per_unit: 10, algorithm: token_bucket, burst: 4}
`;

type Descriptor = NonNullable<RateLimitRequestObject['descriptors']>[number];
type Status = NonNullable<RateLimitResponseObject['statuses']>[number];
const costing = (hits: string, ...entries: string[]): Descriptor => ({
  ...d(...entries),
  hits_addend: { value: hits },
});
const remaining = (response: RateLimitResponseObject) =>
  (response.statuses ?? []).map((s) => s.limit_remaining);
const statusAt = (response: RateLimitResponseObject, i: number): Status =>
  response.statuses?.[i] ?? {};

let redis: TestRedis;
beforeAll(async () => {
  redis = await startRedis();
});
afterAll(async () => {
  await redis?.stop();
});

describe.each([{ name: 'memory' }, { name: 'redis' }])('costs on the $name store', ({ name }) => {
  let tollgate: Tollgate | undefined;
  afterEach(async () => {
    await tollgate?.stop();
    tollgate = undefined;
  });
  async function start(): Promise<Tollgate> {
    if (name === 'redis') await redis.client.flushall();
    tollgate = await startTollgate({
      rules: RULES,
      ...(name === 'redis' ? { redisUrl: redis.url } : {}),
    });
    return tollgate;
  }
  const check = (descriptors: Descriptor[], hits_addend?: number) =>
    (tollgate as Tollgate).check({
      domain: 'costs',
      descriptors,
      ...(hits_addend === undefined ? {} : { hits_addend }),
    });

  it("charges the request's hits_addend, and 0 means 1", async () => {
    await start();
    expect(remaining(await check([d('five', 'a')], 3))).toEqual([2]);
    expect(remaining(await check([d('five', 'b')], 0))).toEqual([4]);
    expect(remaining(await check([d('five', 'b')], 0))).toEqual([3]);
  });

  it("lets a descriptor's own hits_addend override the request's", async () => {
    await start();
    const response = await check([costing('4', 'five', 'a'), d('five', 'b')], 2);
    expect(codes(response)).toEqual(['OK', 'OK', 'OK']);
    expect(remaining(response)).toEqual([1, 3]);
  });

  it('checks without consuming on an explicit per-descriptor 0', async () => {
    await start();
    expect(remaining(await check([d('five', 'a')], 4))).toEqual([1]);
    for (let i = 0; i < 10; i++) {
      const response = await check([costing('0', 'five', 'a')], 3);
      expect(codes(response)).toEqual(['OK', 'OK']);
      expect(remaining(response)).toEqual([1]);
    }
    expect(remaining(await check([d('five', 'a')]))).toEqual([0]);
    const over = await check([costing('0', 'five', 'a'), d('five', 'b')]);
    expect(codes(over)).toEqual(['OVER_LIMIT', 'OVER_LIMIT', 'OK']);
    expect(remaining(over)).toEqual([0, 5]);
    // The denied check consumed nothing anywhere: b still has all 5.
    expect(remaining(await check([d('five', 'b')]))).toEqual([4]);
  });

  const neverFits = [
    { case: 'cost above the limit', key: 'five', hits: '6', left: 4 },
    { case: 'fixed window cost above the limit', key: 'three', hits: '4', left: 2 },
    { case: 'token bucket cost above the burst', key: 'bucket', hits: '5', left: 3 },
    {
      case: 'descriptor hits_addend at the 64-bit maximum',
      key: 'five',
      hits: '18446744073709551615',
      left: 4,
    },
    { case: 'request hits_addend at the 32-bit maximum', key: 'five', hits: undefined, left: 4 },
  ];

  it.each(neverFits)('denies a cost that can never fit: $case', async ({ key, hits, left }) => {
    await start();
    const descriptor = hits === undefined ? d(key, 'a') : costing(hits, key, 'a');
    // The other descriptor's own cost of 1 keeps it payable whatever the request's cost is.
    const response = await check([descriptor, costing('1', 'three', 'b')], hits ? 1 : 4294967295);
    expect(codes(response)).toEqual(['OVER_LIMIT', 'OVER_LIMIT', 'OK']);
    expect(resetMs(statusAt(response, 0))).toBeUndefined();
    expect(statusAt(response, 1).limit_remaining).toBe(3);
    // Nothing was consumed, neither from the other descriptor nor from the one that never fits.
    expect(remaining(await check([d('three', 'b')]))).toEqual([2]);
    expect(remaining(await check([d(key, 'a')]))).toEqual([left]);
  });

  it('denies the whole request when one descriptor is over, consuming nothing', async () => {
    await start();
    expect(remaining(await check([d('five', 'a')], 2))).toEqual([3]);
    expect(remaining(await check([d('three', 'b')], 3))).toEqual([0]);
    const response = await check([d('five', 'a'), d('three', 'b')]);
    expect(codes(response)).toEqual(['OVER_LIMIT', 'OK', 'OVER_LIMIT']);
    expect(remaining(response)).toEqual([3, 0]);
    expect(resetMs(statusAt(response, 1))).toBeGreaterThan(0);
    expect(remaining(await check([d('five', 'a')]))).toEqual([2]);
  });

  it('adds up the costs of descriptors that land on one counter', async () => {
    await start();
    const twice = [d('three', 'a'), d('three', 'a')];
    const first = await check(twice);
    expect(codes(first)).toEqual(['OK', 'OK', 'OK']);
    expect(remaining(first)).toEqual([1, 1]);
    const second = await check(twice);
    expect(codes(second)).toEqual(['OVER_LIMIT', 'OVER_LIMIT', 'OVER_LIMIT']);
    expect(remaining(second)).toEqual([1, 1]);
    // The denied pair consumed nothing: one more single request still fits.
    expect(codes(await check([d('three', 'a')]))).toEqual(['OK', 'OK']);
  });
});
