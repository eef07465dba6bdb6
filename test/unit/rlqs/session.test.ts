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
import { carryOver, spent } from '../../../src/rlqs/charging.js';
import type { CounterCheck } from '../../../src/store/Store.js';
import { createMemoryDemand } from '../../../src/store/demand.js';
import {
  BucketLimitError,
  createSession,
  type BucketAction,
  type BucketUsage,
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
  const session = (streamId: string) => {
    // The stream's own monotonic clock, moved on by each report's time_elapsed as it arrives:
    // the time its requests came over, as the service sees it.
    let monotonic = 0;
    const opened = createSession({
      streamId,
      rules: () => rules.current,
      store,
      demand,
      plan,
      clock: () => NOW,
      unmatched: 'allow',
      ttlFloorMs: 2000,
      maxBuckets: 10,
      monotonic: () => monotonic,
      ...overrides,
    });
    return {
      ...opened,
      report(domain: string, usages: readonly BucketUsage[]) {
        monotonic += Math.max(0, ...usages.map((u) => u.elapsedMs ?? 0));
        return opened.report(domain, usages);
      },
    };
  };
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
  it("splits the tenant's 1,000 a second by demand between two streams", async () => {
    const { session } = fleet({ current: load(RULES.replace('600,', '60000,')) });
    const [a, b] = [session('a'), session('b')];
    // 20 and 60 requests in a second: enough to measure a rate from one report.
    await a.report('quota', [usage({ tenant: 'acme' }, 1, 19)]);
    const [toB] = await b.report('quota', [usage({ tenant: 'acme' }, 1, 59)]);
    expect(rateOf(toB)).toBeCloseTo(750 * (59.5 / 60), -1);
    const [toA] = await a.report('quota', [usage({ tenant: 'acme' }, 1, 19)]);
    expect(rateOf(toA)).toBeCloseTo(250 * (59.5 / 60), -1);
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

  it('sends the same strategy again for a small move until it holds, and a large rise at the second ask', async () => {
    // 1,000 a second: every demand here is under the rule's rate, which caps a consumer's.
    const { session } = fleet({ current: load(RULES.replace('600,', '60000,')) });
    const a = session('a');
    const b = session('b');
    // Mostly denied, so that the counter keeps its pace and only the shares move.
    await a.report('quota', [usage({ tenant: 't' }, 5, 45)]);
    const [first] = await b.report('quota', [usage({ tenant: 't' }, 5, 45)]);
    // b's demand 10% up, its share about 5% up: kept for two reports, taken at the third.
    const [small] = await b.report('quota', [usage({ tenant: 't' }, 5, 50)]);
    expect(small).toEqual(first);
    const [still] = await b.report('quota', [usage({ tenant: 't' }, 5, 50)]);
    expect(still).toEqual(first);
    const [held] = await b.report('quota', [usage({ tenant: 't' }, 5, 50)]);
    expect(rateOf(held)).toBeGreaterThan(rateOf(first) * 1.02);
    const [asked] = await b.report('quota', [usage({ tenant: 't' }, 5, 145)]);
    expect(asked).toEqual(held);
    const [large] = await b.report('quota', [usage({ tenant: 't' }, 5, 145)]);
    expect(rateOf(large)).toBeGreaterThan(rateOf(held) * 1.1);
  });

  it('keeps its assignment over reports of 0 s and 1 s in turn, as whole seconds make them', async () => {
    let now = 0;
    const { session } = fleet(
      { current: load(RULES.replace('600,', '60000,')) },
      { monotonic: () => now },
    );
    const [a, b] = [session('a'), session('b')];
    const sent: BucketAction[] = [];
    // Both want 40 a second. a reports every 2 s; b's reports, 0.5 s and 1.5 s apart, say 0 s
    // and 1 s, as whole seconds make them: its 80 requests came over 2 s, not 1.
    for (let round = 0; round < 12; round++) {
      now += 500;
      await b.report('quota', [{ ...usage({ tenant: 'm' }, 0, 20), elapsedMs: 0 }]);
      now += 1500;
      await a.report('quota', [{ ...usage({ tenant: 'm' }, 0, 80), elapsedMs: 2000 }]);
      const [toB] = await b.report('quota', [
        { ...usage({ tenant: 'm' }, 0, 60), elapsedMs: 1000 },
      ]);
      if (round >= 3) sent.push(toB!);
    }
    expect(new Set(sent.map((action) => JSON.stringify(action))).size).toBe(1);
    expect(rateOf(sent[0])).toBeGreaterThan(490);
    expect(rateOf(sent[0])).toBeLessThanOrEqual(500);
  });

  it("takes a reopened stream's first report over the time it says, not the stream's age", async () => {
    let now = 0;
    const { session } = fleet(
      { current: load(RULES.replace('600,', '60000,')) },
      { monotonic: () => now },
    );
    const a = session('a');
    for (let i = 0; i < 3; i++) {
      now += 1000;
      await a.report('quota', [usage({ tenant: 'r' }, 0, 40)]);
    }
    // An Envoy whose stream was ended opens another, and reports its last 5 s on it at once.
    const b = session('b');
    const [toB] = await b.report('quota', [{ ...usage({ tenant: 'r' }, 0, 200), elapsedMs: 5000 }]);
    // 40 a second, as a's: about half the rule, not five times a's share.
    expect(rateOf(toB)).toBeGreaterThan(440);
    expect(rateOf(toB)).toBeLessThan(550);
  });

  it('denies while classic checks have spent the window, and assigns again in the next', async () => {
    const rules = load(RULES);
    let now = NOW + 30_000;
    const { session, store } = fleet({ current: rules }, { clock: () => now });
    const a = session('a');
    const [alone] = await a.report('quota', [usage({ tenant: 'acme' }, 1)]);
    // 600 a minute, less half a second of it kept for a bucket that starts full.
    expect(rateOf(alone)).toBeCloseTo(10 * (59.5 / 60), 1);
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
    expect(rateOf(next)).toBeCloseTo(10 * (59.5 / 60), 1);
  });

  it('takes a joining bucket at no more demand than its first report shows, and makes room for it', async () => {
    // 1,000 a second, so that neither client's demand is capped at the rule's rate.
    const { session } = fleet({ current: load(RULES.replace('600,', '60000,')) });
    const [a, b] = [session('a'), session('b')];
    for (let i = 0; i < 3; i++) await a.report('quota', [usage({ tenant: 'j' }, 0, 40)]);
    // Envoy's immediate report for a new bucket: 41 requests, time_elapsed truncated to 0 s.
    const [joined] = await b.report('quota', [{ ...usage({ tenant: 'j' }, 0, 41), elapsedMs: 0 }]);
    // About even: 41 a second against 40, not 410 against 40.
    expect(rateOf(joined)).toBeLessThan(600);
    // Until b is measured, a leaves it the pool: the two never add up to more than the rule.
    const [room] = await a.report('quota', [usage({ tenant: 'j' }, 0, 40)]);
    expect(rateOf(room) + rateOf(joined)).toBeLessThanOrEqual(1000);
    await b.report('quota', [usage({ tenant: 'j' }, 0, 40)]);
    // Measured, b wants its own: a gets most of the pool back, at its second report asking.
    await a.report('quota', [usage({ tenant: 'j' }, 0, 40)]);
    const [kept] = await a.report('quota', [usage({ tenant: 'j' }, 0, 40)]);
    expect(rateOf(kept)).toBeGreaterThan(rateOf(room) * 5);
  });

  it("gives a closed stream's share to the others at their second report", async () => {
    const { session } = fleet({ current: load(RULES) });
    const [a, b] = [session('a'), session('b')];
    await a.report('quota', [usage({ tenant: 'acme' }, 1, 9)]);
    const [half] = await b.report('quota', [usage({ tenant: 'acme' }, 1, 9)]);
    expect(rateOf(half)).toBeCloseTo(5, 0);
    await a.close();
    const [asked] = await b.report('quota', [usage({ tenant: 'acme' }, 1, 9)]);
    expect(asked).toEqual(half);
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

describe('a window spent by others than the RLQS clients', () => {
  // 2,000 per 10 s: the RLQS clients' pace is 190 a second.
  const counter: CounterCheck = {
    key: 'k',
    algorithm: 'fixed_window',
    windowMs: 10_000,
    limit: 2000,
    burst: 2000,
    cost: 0,
    shadow: false,
    quota: false,
    overdraw: true,
  };
  const at = (remaining: number, resetMs = 5_000) => [{ fits: remaining > 0, remaining, resetMs }];

  it('counts what the streams carried into it as left, as long as the limit is not reached', () => {
    // 100 left, with 900 of the count from before the window: on pace, not spent.
    expect(spent([counter], at(100), 5_000, [900])).toBe(false);
    expect(spent([counter], at(100), 5_000, [0])).toBe(true);
  });

  it('is spent once the limit is reached, whatever was carried', () => {
    // Past the limit what is left reads 0, however far past: carried parts do not bring it back.
    expect(spent([counter], at(0), 5_000, [900])).toBe(true);
  });
});
