// One RLQS stream's logic on the real in-memory store and demand: reports in, bucket actions
// out, and the counters a classic check reads.
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { ownCounting } from '../../../src/decision/counting.js';
import { planCheck, type PlanPolicy } from '../../../src/decision/plan.js';
import { ruleQuota } from '../../../src/decision/quota.js';
import { loadRules } from '../../../src/rules/loadRules.js';
import type { RuleSet } from '../../../src/rules/types.js';
import { createAdmissionWatch } from '../../../src/rlqs/admissions.js';
import { carryOver } from '../../../src/rlqs/charging.js';
import { createMemoryDemand } from '../../../src/store/demand.js';
import {
  BucketLimitError,
  createSession,
  type BucketAction,
  type SessionOptions,
} from '../../../src/rlqs/session.js';
import { createMemoryStore } from '../../../src/store/memoryStore.js';

const dir = mkdtempSync(join(tmpdir(), 'tollgate-rlqs-session-'));
afterAll(() => rmSync(dir, { recursive: true }));

function load(yaml: string): RuleSet {
  const file = join(dir, `rules-${Math.random().toString(36).slice(2)}.yaml`);
  writeFileSync(file, yaml);
  return loadRules(file, { defaultAlgorithm: 'fixed_window' });
}

const RULES = `
domain: quota
tenant_key: tenant
descriptors:
  - key: tenant
    rate_limit: {name: tenant, unit: minute, requests_per_unit: 600, algorithm: fixed_window}
    descriptors:
      - key: route
        value: beta
        shadow_mode: true
        rate_limit: {name: beta, unit: minute, requests_per_unit: 1}
`;
const plan: PlanPolicy = {
  keyPrefix: '',
  defaultAlgorithm: 'fixed_window',
  counting: ownCounting,
  quota: ruleQuota,
};
const NOW = 1_800_000_000_000;

function fleet(rules: { current: RuleSet }, overrides: Partial<SessionOptions> = {}) {
  const store = createMemoryStore({ clock: () => NOW });
  const demand = createMemoryDemand({ maxConsumers: 100 });
  const session = (streamId: string) =>
    createSession({
      streamId,
      rules: () => rules.current,
      store,
      demand,
      plan,
      clock: () => NOW,
      unmatched: 'allow',
      ttlFloorMs: 2000,
      maxBuckets: 10,
      ...overrides,
    });
  return { store, session };
}

const usage = (bucket: Record<string, string>, allowed: number, denied = 0) => ({
  bucket,
  elapsedMs: 1000,
  allowed,
  denied,
});
const rateOf = (action: BucketAction | undefined): number => {
  if (action?.kind !== 'assign' || action.strategy.kind !== 'token_bucket') return NaN;
  return action.strategy.tokensPerFill / action.strategy.fillIntervalSeconds;
};

describe('an RLQS stream', () => {
  it("splits the tenant's 10 a second by demand between two streams", async () => {
    const { session } = fleet({ current: load(RULES) });
    const [a, b] = [session('a'), session('b')];
    await a.report('quota', [usage({ tenant: 'acme' }, 1)]);
    const [toB] = await b.report('quota', [usage({ tenant: 'acme' }, 3)]);
    expect(rateOf(toB)).toBeCloseTo(7.5, 0);
    const [toA] = await a.report('quota', [usage({ tenant: 'acme' }, 1)]);
    expect(rateOf(toA)).toBeCloseTo(2.5, 0);
    expect(toA).toMatchObject({ kind: 'assign', ttlMs: 3000 });
  });

  it('charges reported admissions to the counters a classic check uses', async () => {
    const rules = load(RULES);
    const { session, store } = fleet({ current: rules });
    await session('a').report('quota', [usage({ tenant: 'acme' }, 590)]);
    const check = planCheck(
      {
        domain: 'quota',
        descriptors: [{ entries: [{ key: 'tenant', value: 'acme' }] }],
        hitsAddend: 1,
      },
      rules,
      plan,
    );
    const first = await store.decide(check.counters, NOW);
    expect(first.results[0]?.remaining).toBe(9);
    await session('a').report('quota', [usage({ tenant: 'acme' }, 100)]);
    expect((await store.decide(check.counters, NOW)).allowed).toBe(false);
  });

  it('sends the same strategy again while the rate moves by 10% or less', async () => {
    // 1,000 a second: every demand here is under the rule's rate, which caps a consumer's.
    const { session } = fleet({ current: load(RULES.replace('600,', '60000,')) });
    const a = session('a');
    const b = session('b');
    // Mostly denied, so that the counter keeps its pace and only the shares move.
    await a.report('quota', [usage({ tenant: 't' }, 5, 45)]);
    const [first] = await b.report('quota', [usage({ tenant: 't' }, 5, 45)]);
    const [small] = await b.report('quota', [usage({ tenant: 't' }, 5, 50)]);
    expect(small).toEqual(first);
    const [large] = await b.report('quota', [usage({ tenant: 't' }, 5, 145)]);
    expect(rateOf(large)).toBeGreaterThan(rateOf(first) * 1.1);
  });

  it('denies while classic checks have spent the window, and assigns again in the next', async () => {
    const rules = load(RULES);
    let now = NOW + 30_000;
    const { session, store } = fleet({ current: rules }, { clock: () => now });
    const a = session('a');
    const [alone] = await a.report('quota', [usage({ tenant: 'acme' }, 1)]);
    // 600 a minute, less one second of it kept for a bucket that starts full.
    expect(rateOf(alone)).toBeCloseTo(10 * (59 / 60), 0);
    const check = planCheck(
      {
        domain: 'quota',
        descriptors: [{ entries: [{ key: 'tenant', value: 'acme' }] }],
        hitsAddend: 599,
      },
      rules,
      plan,
    );
    expect((await store.decide(check.counters, now)).allowed).toBe(true);
    const [spent] = await a.report('quota', [usage({ tenant: 'acme' }, 0)]);
    expect(spent).toMatchObject({
      kind: 'assign',
      strategy: { kind: 'blanket', rule: 'DENY_ALL' },
    });
    now = NOW + 60_000;
    const [next] = await a.report('quota', [usage({ tenant: 'acme' }, 0)]);
    expect(rateOf(next)).toBeCloseTo(10 * (59 / 60), 0);
  });

  it('takes a joining bucket at no more demand than its first report shows', async () => {
    // 1,000 a second, so that neither client's demand is capped at the rule's rate.
    const { session } = fleet({ current: load(RULES.replace('600,', '60000,')) });
    const [a, b] = [session('a'), session('b')];
    for (let i = 0; i < 3; i++) await a.report('quota', [usage({ tenant: 'j' }, 0, 40)]);
    // Envoy's immediate report for a new bucket: 41 requests, time_elapsed truncated to 0 s.
    const [joined] = await b.report('quota', [{ ...usage({ tenant: 'j' }, 0, 41), elapsedMs: 0 }]);
    const [kept] = await a.report('quota', [usage({ tenant: 'j' }, 0, 40)]);
    // About even: 41 a second against 40, not 410 against 40.
    expect(rateOf(joined)).toBeLessThan(600);
    expect(rateOf(kept)).toBeGreaterThan(400);
  });

  it("gives a closed stream's share to the others at their next report", async () => {
    const { session } = fleet({ current: load(RULES) });
    const [a, b] = [session('a'), session('b')];
    await a.report('quota', [usage({ tenant: 'acme' }, 1, 9)]);
    const [half] = await b.report('quota', [usage({ tenant: 'acme' }, 1, 9)]);
    expect(rateOf(half)).toBeCloseTo(5, 0);
    await a.close();
    const [whole] = await b.report('quota', [usage({ tenant: 'acme' }, 1, 9)]);
    expect(rateOf(whole)).toBeCloseTo(10, 0);
  });

  it('counts a bucket past the consumer bound in its share, though it is not recorded', async () => {
    const { session } = fleet(
      { current: load(RULES) },
      { demand: createMemoryDemand({ maxConsumers: 1 }) },
    );
    await session('a').report('quota', [usage({ tenant: 'acme' }, 1, 9)]);
    const [late] = await session('b').report('quota', [usage({ tenant: 'acme' }, 1, 9)]);
    expect(rateOf(late)).toBeCloseTo(5, 0);
  });

  it('counts reported admissions past the limit in their window as over-admitted', async () => {
    let over = 0;
    const { session } = fleet(
      { current: load(RULES) },
      { admissions: createAdmissionWatch(100), onOverAdmitted: (n) => (over += n) },
    );
    const a = session('a');
    await a.report('quota', [usage({ tenant: 'acme' }, 550)]);
    expect(over).toBe(0);
    await a.report('quota', [usage({ tenant: 'acme' }, 80)]);
    expect(over).toBe(30);
    await a.report('quota', [usage({ tenant: 'acme' }, 5)]);
    expect(over).toBe(35);
  });

  it('tells a bucket that matches no rule, or no domain, RLQS_UNMATCHED_ACTION', async () => {
    const { session } = fleet({ current: load(RULES) });
    const [unmatched] = await session('a').report('quota', [usage({ team: 'x' }, 1)]);
    expect(unmatched).toMatchObject({ strategy: { kind: 'blanket', rule: 'ALLOW_ALL' } });
    const deny = fleet({ current: load(RULES) }, { unmatched: 'deny' }).session('a');
    const [denied] = await deny.report('quota', [usage({ team: 'x' }, 1)]);
    expect(denied).toMatchObject({ strategy: { kind: 'blanket', rule: 'DENY_ALL' } });
    const [other] = await deny.report('nowhere', [usage({ tenant: 'x' }, 1)]);
    expect(other).toMatchObject({ strategy: { kind: 'blanket', rule: 'DENY_ALL' } });
  });

  it('abandons a bucket whose rule was removed by a reload', async () => {
    const rules = { current: load(RULES) };
    const a = fleet(rules).session('a');
    await a.report('quota', [usage({ tenant: 'acme' }, 1)]);
    rules.current = load(
      'domain: quota\ndescriptors:\n  - key: team\n    rate_limit: {unit: second, requests_per_unit: 1}\n',
    );
    const [gone] = await a.report('quota', [usage({ tenant: 'acme' }, 1)]);
    expect(gone).toEqual({ bucket: { tenant: 'acme' }, kind: 'abandon' });
    expect(a.buckets()).toBe(0);
  });

  it('refuses a bucket past the per-stream bound, naming the setting', async () => {
    const a = fleet({ current: load(RULES) }, { maxBuckets: 2 }).session('a');
    await a.report('quota', [usage({ tenant: '1' }, 1), usage({ tenant: '2' }, 1)]);
    await expect(a.report('quota', [usage({ tenant: '3' }, 1)])).rejects.toThrow(BucketLimitError);
    await expect(a.report('quota', [usage({ tenant: '3' }, 1)])).rejects.toThrow(
      /RLQS_MAX_BUCKETS_PER_STREAM/,
    );
  });
});

describe("a report's part from before its window began", () => {
  const window = { windowMs: 10_000, resetMs: 4_000 };
  it('is the share of its time before the boundary, added up within one window', () => {
    // 6 s into the window, a report of 500 over 5 s: all of it came after the boundary.
    expect(carryOver(undefined, { at: 100_000, allowed: 500, coveredMs: 5_000 }, window)).toEqual({
      endsAt: 104_000,
      requests: 0,
    });
    // 1 s into the window, a report of 500 over 5 s: 4 s of it, 400, came before.
    const first = carryOver(
      undefined,
      { at: 95_000, allowed: 500, coveredMs: 5_000 },
      { windowMs: 10_000, resetMs: 9_000 },
    );
    expect(first).toEqual({ endsAt: 104_000, requests: 400 });
    // The same window, seen a few milliseconds apart, adds up; the next window starts afresh.
    expect(carryOver(first, { at: 100_003, allowed: 500, coveredMs: 5_000 }, window).requests).toBe(
      400,
    );
    const next = carryOver(
      first,
      { at: 105_000, allowed: 500, coveredMs: 5_000 },
      { windowMs: 10_000, resetMs: 9_000 },
    );
    expect(next).toEqual({ endsAt: 114_000, requests: 400 });
  });
});
