// The modes a decision is made in, each a small policy chosen once: counting, quota descriptors
// and header kinds.
import { describe, expect, it } from 'vitest';
import type { DescriptorStatus } from '../../../src/core/check.js';
import { ownCounting, referenceCounting } from '../../../src/decision/counting.js';
import { chooseHeaders, type HeaderInput } from '../../../src/decision/headerPolicy.js';
import { globalQuota, ruleQuota } from '../../../src/decision/quota.js';
import type { Limit, RuleNode } from '../../../src/rules/types.js';
import type { CounterCheck } from '../../../src/store/Store.js';

const limit = (fields: Partial<Limit> = {}): Limit => ({
  requestsPerUnit: 10,
  unit: 'minute',
  windowMs: 60_000,
  algorithm: 'fixed_window',
  burst: 10,
  name: 'route',
  overdraw: false,
  ...fields,
});

describe('counting', () => {
  it("tollgate's own: one counter per key, summing costs and taking the strictest limit", () => {
    const counters: CounterCheck[] = [];
    expect(ownCounting.add(counters, 'k', limit(), 2, true, false)).toBe(0);
    expect(
      ownCounting.add(
        counters,
        'k',
        limit({ requestsPerUnit: 4, overdraw: true }),
        3,
        false,
        false,
      ),
    ).toBe(0);
    expect(ownCounting.add(counters, 'j', limit(), 1, false, false)).toBe(1);
    expect(counters[0]).toMatchObject({ cost: 5, limit: 4, shadow: false, overdraw: true });
    const result = { fits: true, remaining: 6, resetMs: 1_000 };
    expect(ownCounting.remaining(limit(), counters[0] as CounterCheck, result)).toBe(6);
    expect(
      ownCounting.counts(limit(), counters[0] as CounterCheck, result, 1, false),
    ).toBeUndefined();
  });

  it("the reference's: a fixed window is a counter per descriptor, whose result is its count", () => {
    const policy = referenceCounting(true, 0.8);
    const counters: CounterCheck[] = [];
    expect(policy.add(counters, 'k', limit(), 1, false, false)).toBe(0);
    expect(policy.add(counters, 'k', limit(), 1, false, false)).toBe(1);
    expect(counters[1]?.reference).toEqual({ stop: true, held: false, cached: false });
    const bucket = limit({ algorithm: 'token_bucket' });
    expect(policy.add(counters, 'b', bucket, 1, false, false)).toBe(2);
    expect(policy.add(counters, 'b', bucket, 1, false, false)).toBe(2);

    const counter = counters[0] as CounterCheck;
    const count = { fits: true, remaining: 9, resetMs: 1_000 };
    expect(policy.remaining(limit(), counter, count)).toBe(1);
    expect(policy.counts(limit(), counter, count, 1, false)).toEqual({
      over: 0,
      near: 1,
      within: 1,
      shadow: 0,
      localCache: 0,
    });
    // Over the limit, its remaining stays 0; answered from the local cache, it is over with 0 left.
    expect(policy.remaining(limit(), counter, { ...count, remaining: 12 })).toBe(0);
    counter.reference = { stop: true, held: true, cached: true };
    expect(policy.remaining(limit(), counter, count)).toBe(0);
    expect(policy.counts(limit(), counter, count, 2, true)).toMatchObject({
      over: 2,
      localCache: 2,
      shadow: 2,
    });
    // A bucket reads as tollgate's own.
    const own = counters[2] as CounterCheck;
    expect(policy.remaining(bucket, own, count)).toBe(9);
    expect(policy.counts(bucket, own, count, 1, false)).toBeUndefined();
  });
});

describe('quota', () => {
  const node = (quotaMode: boolean) => ({ quotaMode }) as RuleNode;
  it("per rule: a rule's quota_mode, never for an override or a shadow rule", () => {
    expect(ruleQuota.isQuota(node(true), false, false)).toBe(true);
    expect(ruleQuota.isQuota(node(false), false, false)).toBe(false);
    expect(ruleQuota.isQuota(node(true), true, false)).toBe(false);
    expect(ruleQuota.isQuota(node(true), false, true)).toBe(false);
    expect(ruleQuota.unjudgedPasses).toBe(false);
  });
  it('QUOTA_MODE: every descriptor but a shadow one, and an unjudged one passes the request', () => {
    expect(globalQuota.isQuota(node(false), true, false)).toBe(true);
    expect(globalQuota.isQuota(undefined, false, true)).toBe(false);
    expect(globalQuota.unjudgedPasses).toBe(true);
  });
});

describe('headers', () => {
  const names = { limit: 'X-Limit', remaining: 'X-Remaining', reset: 'X-Reset' };
  const tight: DescriptorStatus = {
    code: 'OVER_LIMIT',
    currentLimit: { requestsPerUnit: 2, unit: 'minute', name: 'tight' },
    limitRemaining: 0,
    durationUntilResetMs: 30_000,
  };
  const loose: DescriptorStatus = {
    code: 'OK',
    currentLimit: { requestsPerUnit: 10, unit: 'minute', name: 'loose' },
    limitRemaining: 3,
    durationUntilResetMs: 40_000,
  };
  const input = (fields: Partial<HeaderInput> = {}): HeaderInput => ({
    candidates: [
      { limit: limit({ name: 'loose' }), status: loose },
      { limit: limit({ name: 'tight', requestsPerUnit: 2 }), status: tight },
    ],
    statuses: [loose, tight],
    counted: [
      {
        index: 0,
        limit: limit({ name: 'loose' }),
        node: undefined,
        slot: 0,
        cost: 1,
        shadow: false,
        quota: false,
        giveBack: false,
      },
      {
        index: 1,
        limit: limit({ name: 'tight', requestsPerUnit: 2 }),
        node: undefined,
        slot: 1,
        cost: 1,
        shadow: false,
        quota: false,
        giveBack: false,
      },
    ],
    denied: true,
    quotaRetryMs: undefined,
    ...fields,
  });
  const keys = (headers: { key: string }[]) => headers.map((h) => h.key);

  it('none, when neither kind is on', () => {
    expect(
      chooseHeaders({ ietf: false, reference: undefined, referencePick: false }).headers(input()),
    ).toEqual([]);
  });

  it("the IETF ones for the tightest descriptor, with the reference's trio when named", () => {
    const ietf = chooseHeaders({ ietf: true, reference: undefined, referencePick: false });
    expect(ietf.headers(input())).toEqual([
      { key: 'RateLimit-Policy', value: '"tight";q=2;w=60' },
      { key: 'RateLimit', value: '"tight";r=0;t=30' },
      { key: 'Retry-After', value: '30' },
    ]);
    const both = chooseHeaders({ ietf: true, reference: names, referencePick: false });
    expect(keys(both.headers(input()))).toEqual([
      'RateLimit-Policy',
      'RateLimit',
      'Retry-After',
      'X-Limit',
      'X-Remaining',
      'X-Reset',
    ]);
  });

  it('COMPAT_MODE=reference: the trio for the descriptor the reference picks, over the statuses', () => {
    const compat = chooseHeaders({ ietf: false, reference: names, referencePick: true });
    expect(compat.headers(input())).toEqual([
      { key: 'X-Limit', value: '2' },
      { key: 'X-Remaining', value: '0' },
      { key: 'X-Reset', value: '30' },
    ]);
    expect(compat.headers(input({ counted: [] }))).toEqual([]);
  });
});
