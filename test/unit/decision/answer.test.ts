// The answer: from a plan and the store's verdicts, the statuses, the code, the headers and the
// metadata. Pure, so each case is a plan, a verdict made up for it, and what the caller gets.
import { describe, expect, it } from 'vitest';
import {
  answerFailure,
  answerPlan,
  answerSettled,
  type AnswerPolicy,
} from '../../../src/decision/answer.js';
import { ownCounting } from '../../../src/decision/counting.js';
import { chooseHeaders } from '../../../src/decision/headerPolicy.js';
import { planCheck, type PlanPolicy } from '../../../src/decision/plan.js';
import { ruleQuota } from '../../../src/decision/quota.js';
import type { RuleOutcome } from '../../../src/decision/outcome.js';
import type { CounterResult, StoreDecision } from '../../../src/store/Store.js';
import { check, d, load } from './rules.js';

const rules = load();
const planPolicy: PlanPolicy = {
  keyPrefix: '',
  defaultAlgorithm: 'sliding_window',
  counting: ownCounting,
  quota: ruleQuota,
};
const policy: AnswerPolicy = {
  counting: ownCounting,
  headers: chooseHeaders({ ietf: true, reference: undefined, referencePick: false }),
  shadowMode: false,
  wholeSecondResets: false,
  dynamicMetadata: false,
  nearRatio: 0.8,
};
const fits = (remaining: number, resetMs = 30_500): CounterResult => ({
  fits: true,
  remaining,
  resetMs,
});
const over = (resetMs = 30_500): CounterResult => ({ fits: false, remaining: 0, resetMs });
const verdict = (allowed: boolean, ...results: CounterResult[]): StoreDecision => ({
  allowed,
  results,
});

describe('the answer', () => {
  it('says OVER_LIMIT with each status, and headers built once for the tightest limit', () => {
    const plan = planCheck(
      check(d('route', '/a'), d('free', 'x'), d('tagged', 'y')),
      rules,
      planPolicy,
    );
    const { decision, globalShadow } = answerPlan(
      plan,
      verdict(false, fits(9), over()),
      policy,
      undefined,
    );
    expect(globalShadow).toBe(false);
    expect(decision.code).toBe('OVER_LIMIT');
    expect(decision.statuses).toEqual([
      {
        code: 'OK',
        currentLimit: { requestsPerUnit: 10, unit: 'minute', name: 'route' },
        limitRemaining: 9,
        durationUntilResetMs: 30_500,
      },
      { code: 'OK', limitRemaining: 4_294_967_295 },
      {
        code: 'OVER_LIMIT',
        currentLimit: { requestsPerUnit: 3, unit: 'second', name: 'tagged' },
        limitRemaining: 0,
        durationUntilResetMs: 30_500,
      },
    ]);
    expect(decision.headers).toEqual([
      { key: 'RateLimit-Policy', value: '"tagged";q=3;w=1' },
      { key: 'RateLimit', value: '"tagged";r=0;t=31' },
      { key: 'Retry-After', value: '31' },
    ]);
    expect(decision.dynamicMetadata).toBeUndefined();
  });

  it('leaves the plan as it was, so one plan can be answered twice', () => {
    const plan = planCheck(check(d('free', 'x'), d('route', '/a')), rules, planPolicy);
    const first = answerPlan(plan, verdict(true, fits(3)), policy, undefined);
    const second = answerPlan(plan, verdict(false, over()), policy, undefined);
    expect(first.decision.statuses[1]?.code).toBe('OK');
    expect(second.decision.statuses[1]?.code).toBe('OVER_LIMIT');
    expect(plan.settled[1]).toBeUndefined();
  });

  it('under SHADOW_MODE, a denial is answered OK and flagged', () => {
    const plan = planCheck(check(d('route', '/a')), rules, planPolicy);
    const answer = answerPlan(
      plan,
      verdict(false, over()),
      { ...policy, shadowMode: true },
      undefined,
    );
    expect(answer.decision.code).toBe('OK');
    expect(answer.decision.statuses[0]?.code).toBe('OVER_LIMIT');
    expect(answer.globalShadow).toBe(true);
  });

  it('a shadow rule reports OK, and only enforced descriptors shape the headers', () => {
    const plan = planCheck(check(d('soft', 'x'), d('route', '/a')), rules, planPolicy);
    const { decision } = answerPlan(plan, verdict(true, over(400), fits(2)), policy, undefined);
    expect(decision.statuses.map((s) => s.code)).toEqual(['OK', 'OK']);
    expect(decision.headers?.[0]).toEqual({ key: 'RateLimit-Policy', value: '"route";q=10;w=60' });
  });

  it('when every quota descriptor is over, Retry-After waits for the first to free up', () => {
    const plan = planCheck(
      check(d('pool_a', 'x'), d('pool_b', 'x'), d('route', '/a')),
      rules,
      planPolicy,
    );
    const { decision } = answerPlan(
      plan,
      verdict(false, over(50_000), over(3_000_000), fits(5, 10_000)),
      policy,
      undefined,
    );
    expect(decision.code).toBe('OVER_LIMIT');
    expect(decision.headers).toContainEqual({ key: 'Retry-After', value: '50' });
  });

  it('COMPAT_MODE=reference rounds every reset up to a whole second', () => {
    const plan = planCheck(check(d('route', '/a')), rules, planPolicy);
    const { decision } = answerPlan(
      plan,
      verdict(true, fits(4, 1_200)),
      { ...policy, wholeSecondResets: true },
      undefined,
    );
    expect(decision.statuses[0]?.durationUntilResetMs).toBe(2_000);
  });

  it('tells observers of each counted rule: hits, over, near and shadowed', () => {
    const plan = planCheck(
      { ...check(d('route', '/a'), d('soft', 'x')), hitsAddend: 2 },
      rules,
      planPolicy,
    );
    const outcomes: RuleOutcome[] = [];
    answerPlan(plan, verdict(true, fits(1), over()), policy, outcomes);
    expect(
      outcomes.map(({ metricKey, hits, over, near, shadowed }) => ({
        metricKey,
        hits,
        over,
        near,
        shadowed,
      })),
    ).toEqual([
      { metricKey: ['route'], hits: 2, over: false, near: true, shadowed: false },
      { metricKey: ['soft'], hits: 2, over: true, near: false, shadowed: true },
    ]);
  });

  it("gives the matched rules' metadata of the descriptors that passed", () => {
    const plan = planCheck(check(d('tagged', 'y'), d('route', '/a')), rules, planPolicy);
    const metadata = { ...policy, dynamicMetadata: true };
    const passed = answerPlan(plan, verdict(true, fits(2), fits(9)), metadata, undefined);
    expect(passed.decision.dynamicMetadata).toMatchObject({
      domain: 'api',
      descriptors: [{ entries: ['tagged=y'] }, { entries: ['route=/a'] }],
      metadata: { team: 'billing' },
    });
    const denied = answerPlan(plan, verdict(false, over(), fits(9)), metadata, undefined);
    expect(denied.decision.dynamicMetadata?.metadata).toBeUndefined();
  });

  it('with nothing to count, every descriptor is settled and there are no headers', () => {
    const plan = planCheck(check(d('free', 'x'), d('nothing', 'y')), rules, planPolicy);
    const decision = answerSettled(plan, policy);
    expect(decision).toEqual({
      code: 'OK',
      statuses: [
        { code: 'OK', limitRemaining: 4_294_967_295 },
        { code: 'OK', limitRemaining: 0 },
      ],
    });
  });

  it('FAILURE_MODE=deny or allow answers every counted descriptor alike, with no headers', () => {
    const plan = planCheck(check(d('free', 'x'), d('route', '/a')), rules, planPolicy);
    expect(answerFailure(plan, 'deny')).toEqual({
      code: 'OVER_LIMIT',
      statuses: [
        { code: 'OK', limitRemaining: 4_294_967_295 },
        {
          code: 'OVER_LIMIT',
          currentLimit: { requestsPerUnit: 10, unit: 'minute', name: 'route' },
          limitRemaining: 0,
        },
      ],
    });
    expect(answerFailure(plan, 'allow').statuses[1]).toEqual({ code: 'OK', limitRemaining: 0 });
  });

  it('refuses a verdict with fewer results than counters', () => {
    const plan = planCheck(check(d('route', '/a'), d('tagged', 'y')), rules, planPolicy);
    expect(() => answerPlan(plan, verdict(true, fits(1)), policy, undefined)).toThrow(
      /fewer results than counters/,
    );
  });
});
