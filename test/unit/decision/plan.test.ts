// The plan: which counters a check asks the store for, with which limits and roles. Pure, so each
// case is the rules, a check and the plan that comes out.
import { describe, expect, it } from 'vitest';
import { ownCounting, referenceCounting } from '../../../src/decision/counting.js';
import { planCheck, type PlanPolicy } from '../../../src/decision/plan.js';
import { globalQuota, ruleQuota } from '../../../src/decision/quota.js';
import { InvalidRequestError } from '../../../src/core/errors.js';
import { check, d, load } from './rules.js';

const rules = load();
const own: PlanPolicy = {
  keyPrefix: 'p_',
  defaultAlgorithm: 'sliding_window',
  counting: ownCounting,
  quota: ruleQuota,
};

describe('the plan', () => {
  it('counts nothing for a domain without rules, and settles every descriptor OK', () => {
    const plan = planCheck({ ...check(d('route', '/a')), domain: 'other' }, rules, own);
    expect(plan.unknownDomain).toBe(true);
    expect(plan.counters).toEqual([]);
    expect(plan.settled).toEqual([{ code: 'OK', limitRemaining: 0 }]);
  });

  it('settles unlimited, limitless and replaced descriptors without a counter', () => {
    const plan = planCheck(
      check(d('free', 'x'), d('nothing', 'x'), d('route', '/a'), d('vip', 'acme')),
      rules,
      own,
    );
    expect(plan.settled.slice(0, 3)).toEqual([
      { code: 'OK', limitRemaining: 4_294_967_295 },
      { code: 'OK', limitRemaining: 0 },
      { code: 'OK', limitRemaining: 0 },
    ]);
    expect(plan.counted.map((c) => [c.index, c.limit.name])).toEqual([[3, 'vip']]);
    expect(plan.counters).toHaveLength(1);
    expect(plan.counters[0]?.key).toContain('p_');
  });

  it('gives each descriptor its limit, cost and role', () => {
    const plan = planCheck(
      { ...check(d('route', '/a'), d('soft', 'x'), d('pool_a', 'x')), hitsAddend: 3 },
      rules,
      own,
    );
    expect(
      plan.counted.map(({ index, cost, shadow, quota, slot }) => [
        index,
        cost,
        shadow,
        quota,
        slot,
      ]),
    ).toEqual([
      [0, 3, false, false, 0],
      [1, 3, true, false, 1],
      [2, 3, false, true, 2],
    ]);
    expect(plan.counters.map((c) => [c.limit, c.windowMs, c.shadow, c.quota])).toEqual([
      [10, 60_000, false, false],
      [1, 1_000, true, false],
      [1, 60_000, false, true],
    ]);
  });

  it("plans a caller's override with the rule's algorithm, enforced even on a shadow rule", () => {
    const descriptor = { ...d('soft', 'x'), limit: { requestsPerUnit: 7, unit: 'hour' as const } };
    const plan = planCheck(check(descriptor), rules, own);
    expect(plan.counted[0]).toMatchObject({ node: undefined, shadow: false, quota: false });
    expect(plan.counters[0]).toMatchObject({
      limit: 7,
      windowMs: 3_600_000,
      algorithm: 'fixed_window',
    });
  });

  it('refuses an override the algorithm cannot take exactly, naming the descriptor', () => {
    const descriptor = {
      ...d('bucket', 'x'),
      limit: { requestsPerUnit: 4_294_967_295, unit: 'year' as const },
    };
    expect(() => planCheck(check(d('route', '/a'), descriptor), rules, own)).toThrow(
      InvalidRequestError,
    );
    expect(() => planCheck(check(d('route', '/a'), descriptor), rules, own)).toThrow(
      /descriptors\[1\]\.limit/,
    );
  });

  it('is pure: the same check and rules give the same plan, and the check is untouched', () => {
    const input = check(d('route', '/a'), d('route', '/a'), d('bucket', 'x'));
    const before = structuredClone(input);
    expect(planCheck(input, rules, own)).toEqual(planCheck(input, rules, own));
    expect(input).toEqual(before);
  });

  it('under global QUOTA_MODE, one descriptor without a limit takes every counter out of the gate', () => {
    const quota = { ...own, quota: globalQuota };
    const limited = planCheck(check(d('route', '/a'), d('bucket', 'x')), rules, quota);
    expect(limited.counters.map((c) => [c.quota, c.shadow])).toEqual([
      [true, false],
      [true, false],
    ]);
    const passing = planCheck(check(d('route', '/a'), d('nothing', 'x')), rules, quota);
    expect(passing.counters.map((c) => [c.quota, c.shadow])).toEqual([[true, true]]);
    // Per rule, a limitless descriptor changes nothing.
    const perRule = planCheck(check(d('pool_a', 'x'), d('nothing', 'x')), rules, own);
    expect(perRule.counters.map((c) => [c.quota, c.shadow])).toEqual([[true, false]]);
  });

  it('shares one counter between descriptors of one key, or not, as the counting policy says', () => {
    const input = check(d('route', '/a'), d('route', '/a'), d('bucket', 'x'), d('bucket', 'x'));
    const shared = planCheck(input, rules, own);
    expect(shared.counters.map((c) => c.cost)).toEqual([2, 2]);
    expect(shared.counted.map((c) => c.slot)).toEqual([0, 0, 1, 1]);
    const reference = planCheck(input, rules, {
      ...own,
      counting: referenceCounting(false, 0.8),
    });
    // The reference counts fixed windows one descriptor at a time; a bucket is tollgate's own.
    expect(reference.counted.map((c) => c.slot)).toEqual([0, 1, 2, 2]);
    expect(reference.counters.map((c) => c.reference !== undefined)).toEqual([true, true, false]);
  });
});
