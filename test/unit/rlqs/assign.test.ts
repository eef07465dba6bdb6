// The arithmetic of fair RLQS assignments: each case is a rule, the consumers' demand, and the
// token bucket that comes out.
import { describe, expect, it } from 'vitest';
import {
  assignmentTtlMs,
  consumerBudget,
  settle,
  shareOf,
  tokenBucketFor,
  type Pool,
} from '../../../src/rlqs/assign.js';

const perMinute = (limit: number): Pool => ({
  ratePerSecond: limit / 60,
  burst: undefined,
  windowMs: 60_000,
});

/** Tokens per second a strategy lets through at steady state. */
const rateOf = (s: { tokensPerFill: number; fillIntervalSeconds: number }) =>
  s.tokensPerFill / s.fillIntervalSeconds;

describe('fair RLQS assignments', () => {
  it('splits a rule by demand, and evenly before any demand is known', () => {
    expect(shareOf({ demand: 30, totalDemand: 120, consumers: 4 })).toBe(0.25);
    expect(shareOf({ demand: 0, totalDemand: 0, consumers: 4 })).toBe(0.25);
    expect(shareOf({ demand: 5, totalDemand: 5, consumers: 1 })).toBe(1);
  });

  it('gives every consumer of 1,000 a minute its share, the shares summing to the rule', () => {
    const demands = [10, 10, 40, 100];
    const total = demands.reduce((a, b) => a + b);
    const strategies = demands.map((demand) =>
      tokenBucketFor(
        consumerBudget([{ pool: perMinute(1000), demand, totalDemand: total, consumers: 4 }]),
      ),
    );
    const sum = strategies.reduce((acc, s) => acc + rateOf(s), 0);
    // Each fill rounded down over a long fill: never more than the rule, and within 1% under it.
    expect(sum * 60).toBeGreaterThan(1000 * 0.99);
    expect(sum * 60).toBeLessThanOrEqual(1000);
    for (const s of strategies) {
      expect(Number.isInteger(s.fillIntervalSeconds)).toBe(true);
      // A new bucket starts with half a second of its share.
      expect(s.maxTokens).toBe(Math.max(1, Math.ceil(rateOf(s) / 2)));
    }
    expect(rateOf(strategies[3]!) / rateOf(strategies[0]!)).toBeCloseTo(10, 0);
  });

  it("takes the token-bucket rule's burst share as the capacity", () => {
    const pool: Pool = { ratePerSecond: 100, burst: 400, windowMs: 1000 };
    const s = tokenBucketFor(consumerBudget([{ pool, demand: 1, totalDemand: 4, consumers: 2 }]));
    expect(s).toEqual({ maxTokens: 100, tokensPerFill: 25, fillIntervalSeconds: 1 });
  });

  it('holds a bucket under two rules to the smaller share', () => {
    const tenant = { pool: perMinute(6000), demand: 50, totalDemand: 100, consumers: 2 };
    const route = { pool: perMinute(600), demand: 50, totalDemand: 60, consumers: 2 };
    expect(consumerBudget([tenant, route]).ratePerSecond).toBeCloseTo((600 / 60) * (50 / 60));
  });

  it('writes the rate over a fill of 200 tokens, within the window and a day, in whole seconds', () => {
    expect(tokenBucketFor({ ratePerSecond: 9, burst: undefined, windowMs: 60_000 })).toEqual({
      maxTokens: 5,
      tokensPerFill: 207,
      fillIntervalSeconds: 23,
    });
    // A rule of one an hour fills one token an hour, not one a minute.
    const tiny = tokenBucketFor({ ratePerSecond: 1 / 3600, burst: undefined, windowMs: 3_600_000 });
    expect(tiny).toEqual({ maxTokens: 1, tokensPerFill: 1, fillIntervalSeconds: 3600 });
    const second = tokenBucketFor({ ratePerSecond: 2, burst: undefined, windowMs: 1000 });
    expect(second).toEqual({ maxTokens: 1, tokensPerFill: 2, fillIntervalSeconds: 1 });
  });

  it('takes a large fall at once, a large rise at the second ask, a small move once it holds for 3 reports and 5 s, and noise never', () => {
    expect(settle(undefined, 5, 0)).toEqual({ rate: 5, streak: 0, since: 0 });
    const at100 = { rate: 100, streak: 0, since: 0 };
    // A client joined.
    expect(settle(at100, 94, 5000).rate).toBe(94);
    // A client left: taken when the next report asks for a rise too.
    const asked = settle(at100, 150, 5000);
    expect(asked).toEqual({ rate: 100, streak: 1, since: 5000 });
    expect(settle(asked, 148, 10_000).rate).toBe(148);
    // A joining bucket measured over longer spans: once a rise is taken, the next is too.
    let ramp = settle(undefined, 0.3, 0);
    ramp = settle(ramp, 2, 10);
    expect(ramp.rate).toBe(0.3);
    ramp = settle(ramp, 21, 500);
    expect(ramp.rate).toBe(21);
    ramp = settle(ramp, 38, 1000);
    expect(ramp.rate).toBe(38);
    // A fall ends the run: the next rise waits for a second report again.
    ramp = settle(ramp, 30, 1500);
    expect(settle(ramp, 38, 2000).rate).toBe(30);
    // Envoy's report at once after a changed assignment neither breaks a run of rises...
    let run = settle(undefined, 0.3, 0);
    run = settle(run, 2, 10, true);
    expect(run).toEqual({ rate: 0.3, streak: 0, since: 0 });
    run = settle(run, 21, 500);
    expect(run.rate).toBe(0.3);
    run = settle(run, 38, 1000);
    expect(run.rate).toBe(38);
    expect(settle(run, 38.1, 1005, true)).toEqual(run);
    expect(settle(settle(run, 38.1, 1005, true), 45, 1500).rate).toBe(45);
    // ...nor starts one, and a fall past 5% is taken from it at once.
    expect(settle(settle(at100, 150, 100, true), 150, 500).rate).toBe(100);
    expect(settle(at100, 80, 100, true).rate).toBe(80);
    // One report that saw too few clients, then the right ones: nothing moves.
    expect(settle(asked, 100.5, 10_000)).toEqual({ rate: 100, streak: 0, since: 10_000 });
    // Within 1%: the same rate.
    expect(settle({ rate: 100, streak: 2, since: 0 }, 100.9, 10_000).rate).toBe(100);
    // 4% lower three reports in a row, 5 s apart: taken at the third.
    let state = at100;
    for (const [i, expected] of [100, 100, 96].entries()) {
      state = settle(state, 96, 5000 * (i + 1));
      expect(state.rate).toBe(expected);
    }
    // 500 ms apart, three reports are not enough: the move is taken once it has held for 5 s.
    state = at100;
    for (let i = 0; i <= 10; i++) {
      state = settle(state, 96, 500 * i);
      expect(state.rate).toBe(i < 10 ? 100 : 96);
    }
    // Noise of 3% either way, report after report, never moves it.
    state = at100;
    for (let i = 0; i < 20; i++) {
      state = settle(state, i % 2 === 0 ? 103 : 97, 5000 * i);
      expect(state.rate).toBe(100);
    }
  });

  it('lives a few reporting intervals, never under the floor', () => {
    // Before the interval is known: three of Envoy's released 5 s, so the next report comes first.
    expect(assignmentTtlMs(undefined, 2000)).toBe(15_000);
    expect(assignmentTtlMs(undefined, 30_000)).toBe(30_000);
    expect(assignmentTtlMs(100, 2000)).toBe(2000);
    expect(assignmentTtlMs(1000, 2000)).toBe(3000);
  });
});
