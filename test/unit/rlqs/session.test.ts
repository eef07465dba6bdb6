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
import { reserveAhead, roomLeft } from '../../../src/rlqs/charging.js';
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

/** The counters a classic check of tenant acme reaches, charging `hitsAddend`. */
const acmeCounters = (rules: RuleSet, hitsAddend = 0) =>
  planCheck(
    { domain: 'quota', descriptors: [{ entries: [{ key: 'tenant', value: 'acme' }] }], hitsAddend },
    rules,
    plan,
  ).counters;

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

  it('charges reported admissions, and what the client will admit until its next report, to the counters a classic check uses', async () => {
    const rules = load(RULES);
    const { session, store } = fleet({ current: rules });
    const a = session('a');
    const counters = acmeCounters(rules);
    // A cost of 0 reads the counter without consuming.
    const read = counters.map((counter) => ({ ...counter, cost: 0 }));
    const left = async () => (await store.decide(read, NOW)).results[0]!.remaining;
    const before = await left();
    await a.report('quota', [usage({ tenant: 'acme' }, 100)]);
    // 100 admitted, and one reporting interval (1 s) at the assigned 9.9 a second: 9 charged
    // ahead.
    expect(await left()).toBe(before - 100 - 9);
    // 10 admitted: 9 came out of what was charged ahead, 1 passed it; 9 more are charged ahead.
    await a.report('quota', [usage({ tenant: 'acme' }, 10)]);
    expect(await left()).toBe(before - 100 - 9 - 10);
    // 500 admitted pass what was charged ahead: the rest is charged now, past the limit.
    await a.report('quota', [usage({ tenant: 'acme' }, 500)]);
    expect(await left()).toBe(0);
  });

  it('sends the same strategy again for a small move until it holds, and a large rise at the second ask', async () => {
    // 1,000 a second: every demand here is under the rule's rate, which caps a consumer's.
    const { session } = fleet({ current: load(RULES.replace('600,', '60000,')) });
    const a = session('a');
    const b = session('b');
    // Mostly denied, so that the counter keeps its pace and only the shares move.
    await a.report('quota', [usage({ tenant: 't' }, 5, 45)]);
    const [first] = await b.report('quota', [usage({ tenant: 't' }, 5, 45)]);
    // b's demand 10% up, its share about 5% up: kept until it has asked for 5 s (its reports
    // are a second apart), taken at the sixth.
    for (let i = 0; i < 5; i++) {
      const [kept] = await b.report('quota', [usage({ tenant: 't' }, 5, 50)]);
      expect(kept).toEqual(first);
    }
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

  it('shares out what is held when classic checks fill the window, denies once nothing is, and assigns again in the next', async () => {
    const rules = load(RULES);
    let now = NOW + 30_000;
    const { session, store } = fleet({ current: rules }, { clock: () => now });
    const a = session('a');
    const [alone] = await a.report('quota', [usage({ tenant: 'acme' }, 1)]);
    // 600 a minute, less half a second of it kept for a bucket that starts full.
    expect(rateOf(alone)).toBeCloseTo(10 * (59.5 / 60), 1);
    const counters = acmeCounters(rules);
    // Classic checks take all that is left beside what the client was charged ahead: one
    // reporting interval (1 s) at its rate, 9.
    const read = counters.map((counter) => ({ ...counter, cost: 0 }));
    const left = (await store.decide(read, now)).results[0]!.remaining;
    const classic = { ...counters[0]!, cost: left };
    expect((await store.decide([classic], now)).allowed).toBe(true);
    // The 9 held are the client's, over the 30 s left of the window.
    const [graded] = await a.report('quota', [usage({ tenant: 'acme' }, 0)]);
    expect(rateOf(graded)).toBeCloseTo(9 / 30, 2);
    expect((await store.decide(read, now)).results[0]!.remaining).toBe(0);
    // Once it has admitted them, nothing is left for it: denied, and what the report charged
    // ahead is given back.
    now += 25_000;
    const [denied] = await a.report('quota', [usage({ tenant: 'acme' }, 9)]);
    expect(denied).toMatchObject({
      kind: 'assign',
      strategy: { kind: 'blanket', rule: 'DENY_ALL' },
    });
    expect((await store.decide(read, now)).results[0]!).toMatchObject({ remaining: 0 });
    expect((await store.decide(read, now)).results[0]!.past).toBeUndefined();
    now = NOW + 60_000;
    const [next] = await a.report('quota', [usage({ tenant: 'acme' }, 0)]);
    expect(rateOf(next)).toBeCloseTo(10 * (59.5 / 60), 1);
  });

  it('gives back what a closed stream held charged ahead', async () => {
    const rules = load(RULES);
    const { session, store } = fleet({ current: rules });
    const read = acmeCounters(rules).map((counter) => ({ ...counter, cost: 0 }));
    const a = session('a');
    await a.report('quota', [usage({ tenant: 'acme' }, 100)]);
    // 100 admitted, and 9 charged ahead.
    expect((await store.decide(read, NOW)).results[0]!.remaining).toBe(600 - 109);
    await a.close();
    expect((await store.decide(read, NOW)).results[0]!.remaining).toBe(600 - 100);
  });

  /**
   * A client on the tenant's 600 a minute, 30 s into a window, whose next report finds the
   * window filled by classic checks: held back to its end. Timers are the test's to run.
   */
  async function heldBack() {
    const rules = load(RULES);
    const clock = { now: NOW + 30_000 };
    const timers: { run: () => void; delayMs: number }[] = [];
    const pushed: BucketAction[][] = [];
    const { session, store } = fleet(
      { current: rules },
      {
        clock: () => clock.now,
        schedule: (run, delayMs) => {
          timers.push({ run, delayMs });
          return () => undefined;
        },
        push: (work) => void work().then((actions) => pushed.push(actions)),
      },
    );
    const a = session('a');
    await a.report('quota', [usage({ tenant: 'acme' }, 1)]);
    const [counter] = acmeCounters(rules);
    const left = async () =>
      (await store.decide([{ ...counter!, cost: 0 }], clock.now)).results[0]!.remaining;
    await store.decide([{ ...counter!, cost: await left() }], clock.now);
    const [held] = await a.report('quota', [usage({ tenant: 'acme' }, 0)]);
    /** Runs the timers, and lets what they started finish. */
    const fire = async () => {
      for (const timer of timers) timer.run();
      await new Promise((resolve) => setTimeout(resolve, 10));
    };
    return { a, clock, timers, pushed, held, left, fire };
  }

  it('sends a bucket held back to a window its share once the window rolls over, unasked', async () => {
    const { clock, timers, pushed, held, left, fire } = await heldBack();
    // Held back to the window's end, 30 s away (and a little more, for the store's clock).
    expect(rateOf(held)).toBeLessThan(1);
    expect(timers.map((t) => t.delayMs)).toEqual([30_050]);
    clock.now = NOW + 60_050;
    await fire();
    // Its share again, and what it will admit until its next report charged to the new window.
    expect(pushed).toHaveLength(1);
    expect(rateOf(pushed[0]![0])).toBeCloseTo(10 * (59.5 / 60), 1);
    expect(await left()).toBe(600 - 9);
  });

  it('resumes nothing for a bucket a report has answered since it was held back', async () => {
    const { a, clock, pushed, fire } = await heldBack();
    clock.now = NOW + 61_000;
    const [next] = await a.report('quota', [usage({ tenant: 'acme' }, 0)]);
    expect(rateOf(next)).toBeCloseTo(10 * (59.5 / 60), 1);
    await fire();
    expect(pushed).toEqual([[]]);
  });

  it('denies a token bucket its fallbacks overdrew, until refills pay the debt back', async () => {
    let now = NOW;
    const rules = load(
      'domain: quota\ndescriptors:\n  - key: tenant\n    rate_limit: {unit: second, requests_per_unit: 10, algorithm: token_bucket}\n',
    );
    const { session } = fleet({ current: rules }, { clock: () => now });
    const a = session('a');
    // 1,000 admitted on fallbacks against 10 a second: a debt far past what a client can owe (a
    // burst of 10, and 10 a second over its reporting interval, twice).
    const [denied] = await a.report('quota', [usage({ tenant: 'acme' }, 1000)]);
    expect(denied).toMatchObject({
      kind: 'assign',
      strategy: { kind: 'blanket', rule: 'DENY_ALL' },
    });
    now += 100_000;
    const [again] = await a.report('quota', [usage({ tenant: 'acme' }, 0)]);
    expect(rateOf(again)).toBeCloseTo(10, 0);
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

  it('counts as over-admitted what the store says landed past the limit, on every instance', async () => {
    // A 1 s window: charged as reported, nothing ahead. Two instances on one store, each
    // counting its own charges' part past the limit.
    const rules = { current: load(RULES.replace('unit: minute', 'unit: second')) };
    const over = { a: 0, b: 0 };
    const one = fleet(rules, { onOverAdmitted: (n) => (over.a += n) });
    const other = fleet(rules, { store: one.store, onOverAdmitted: (n) => (over.b += n) });
    const [a, b] = [one.session('a'), other.session('b')];
    await a.report('quota', [usage({ tenant: 'acme' }, 550)]);
    expect(over).toEqual({ a: 0, b: 0 });
    // 630 of 600: the 30 past the limit were charged by b.
    await b.report('quota', [usage({ tenant: 'acme' }, 80)]);
    expect(over).toEqual({ a: 0, b: 30 });
    await a.report('quota', [usage({ tenant: 'acme' }, 5)]);
    expect(over).toEqual({ a: 5, b: 30 });
    // A refund of 40 brings the count to 595: of 10 more, 5 pass the limit again.
    const counter = acmeCounters(rules.current, 40).map((check) => ({ ...check, giveBack: true }));
    await one.store.decide(counter, NOW);
    await b.report('quota', [usage({ tenant: 'acme' }, 10)]);
    expect(over).toEqual({ a: 5, b: 35 });
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

describe('charging ahead', () => {
  it("charges a client's admissions until its next report now, and what passes them later", () => {
    // The first report: 100 admitted, nothing reserved; 50 more reserved for the next interval.
    const first = reserveAhead(undefined, 100, 50, 7);
    expect(first).toEqual({
      charge: { cost: 150, admitted: 100, ahead: 50 },
      reserve: { requests: 50, window: 7 },
    });
    // 60 admitted against 50 reserved: 10 past it, and 50 reserved again.
    const second = reserveAhead(first.reserve, 60, 50, 7);
    expect(second).toEqual({
      charge: { cost: 60, admitted: 10, ahead: 50 },
      reserve: { requests: 50, window: 7 },
    });
    // 20 admitted: 30 of the reserve left, topped up by 20.
    const third = reserveAhead(second.reserve, 20, 50, 7);
    expect(third).toEqual({
      charge: { cost: 20, admitted: 0, ahead: 50 },
      reserve: { requests: 50, window: 7 },
    });
    // Denied now: nothing more reserved, and what was is kept.
    expect(reserveAhead(third.reserve, 0, 0, 7)).toEqual({
      charge: { cost: 0, admitted: 0, ahead: 50 },
      reserve: { requests: 50, window: 7 },
    });
  });

  it("takes a resumed bucket's next report out of what it held of the window before first", () => {
    // Resumed as window 7 ended: 30 held of it, 50 reserved in window 8. Of 40 admitted, 30 were
    // window 7's, charged there: 10 come out of the new reserve, which is topped up by 10.
    const resumed = { requests: 50, window: 8, before: 30 };
    expect(reserveAhead(resumed, 40, 50, 8)).toEqual({
      charge: { cost: 10, admitted: 0, ahead: 50 },
      reserve: { requests: 50, window: 8 },
    });
  });

  it('charges a new fixed window its reserve whole: the last one was spent with its window', () => {
    const last = { requests: 50, window: 7 };
    // 20 admitted came out of the last window's reserve; the new window reserves 50 of its own.
    expect(reserveAhead(last, 20, 50, 8)).toEqual({
      charge: { cost: 50, admitted: 0, ahead: 50 },
      reserve: { requests: 50, window: 8 },
    });
  });
});

describe('a window filled by others than the RLQS clients', () => {
  // 2,000 per 10 s; the report comes 5 s into the window.
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
  const wallMs = 1_800_000_005_000;
  const when = { wallMs, intervalMs: 5_000 };
  const index = Math.floor(wallMs / 10_000);
  const at = (remaining: number, past?: number) => [
    { fits: remaining > 0, remaining, resetMs: 5_000, ...(past ? { past } : {}) },
  ];
  const held = (requests: number, window = index) => new Map([['k', { requests, window }]]);

  it('leaves a bucket what it holds of the window, less what the count passed the limit by', () => {
    expect(roomLeft([counter], at(1), held(100), when)).toEqual({ kind: 'open' });
    // 100 held over the 5 s left: 20 a second.
    expect(roomLeft([counter], at(0), held(100), when)).toEqual({
      kind: 'graded',
      ratePerSecond: 20,
      untilMs: wallMs + 5_000,
    });
    expect(roomLeft([counter], at(0, 30), held(100), when)).toEqual({
      kind: 'graded',
      ratePerSecond: 14,
      untilMs: wallMs + 5_000,
    });
  });

  it('is spent once the bucket holds nothing of it', () => {
    // Until the window ends, at which the bucket is resumed.
    const spent = { kind: 'spent', untilMs: wallMs + 5_000 };
    expect(roomLeft([counter], at(0, 100), held(100), when)).toEqual(spent);
    // Held in a window before: spent with that window.
    expect(roomLeft([counter], at(0), held(100, index - 1), when)).toEqual(spent);
    // Charged as reported (a sliding window), nothing is held.
    const sliding = { ...counter, algorithm: 'sliding_window' as const };
    expect(roomLeft([sliding], at(0), held(100), when)).toEqual({ kind: 'spent' });
    // A shadow rule is never spent so.
    expect(roomLeft([{ ...counter, shadow: true }], at(0), new Map(), when)).toEqual({
      kind: 'open',
    });
  });

  it('leaves a token bucket in the debt its clients can owe, and spends it past twice that', () => {
    // 200 a second, a burst of 200: the clients' starts (200) and a 5 s interval of reserves
    // (1,000) are theirs to owe.
    const bucket = {
      ...counter,
      algorithm: 'token_bucket' as const,
      burst: 200,
      windowMs: 1_000,
      limit: 200,
    };
    expect(roomLeft([bucket], at(0), new Map(), when)).toEqual({ kind: 'open' });
    expect(roomLeft([bucket], at(0, 2_400), new Map(), when)).toEqual({ kind: 'open' });
    expect(roomLeft([bucket], at(0, 2_401), new Map(), when)).toEqual({ kind: 'spent' });
  });
});
