// The arithmetic of fair RLQS assignments: each case is a rule, the consumers' demand, and the
// token bucket that comes out.
import { describe, expect, it } from 'vitest';
import {
  assignmentTtlMs,
  consumerBudget,
  movedEnough,
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
    // Each fill rounded down: never more than the rule, and within 5% under it.
    expect(sum * 60).toBeGreaterThan(1000 * 0.95);
    expect(sum * 60).toBeLessThanOrEqual(1000);
    for (const s of strategies) {
      expect(Number.isInteger(s.fillIntervalSeconds)).toBe(true);
      expect(s.maxTokens).toBe(s.tokensPerFill);
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

  it('fills a slow rule less often, never past its window or a minute, in whole seconds', () => {
    expect(
      tokenBucketFor(
        consumerBudget([{ pool: perMinute(60), demand: 1, totalDemand: 1, consumers: 1 }]),
      ),
    ).toEqual({ maxTokens: 20, tokensPerFill: 20, fillIntervalSeconds: 20 });
    const tiny = tokenBucketFor({ ratePerSecond: 1 / 3600, burst: undefined, windowMs: 3_600_000 });
    expect(tiny).toEqual({ maxTokens: 1, tokensPerFill: 1, fillIntervalSeconds: 60 });
    const second = tokenBucketFor({ ratePerSecond: 2, burst: undefined, windowMs: 1000 });
    expect(second).toEqual({ maxTokens: 2, tokensPerFill: 2, fillIntervalSeconds: 1 });
  });

  it('changes a strategy when the rate rises by more than 10%, or falls by more than 2%', () => {
    expect(movedEnough(undefined, 5)).toBe(true);
    expect(movedEnough(100, 109)).toBe(false);
    expect(movedEnough(100, 111)).toBe(true);
    expect(movedEnough(100, 98.5)).toBe(false);
    expect(movedEnough(100, 97)).toBe(true);
    expect(movedEnough(0, 0)).toBe(false);
  });

  it('lives a few reporting intervals, never under the floor', () => {
    // Before the interval is known: three of Envoy's released 5 s, so the next report comes first.
    expect(assignmentTtlMs(undefined, 2000)).toBe(15_000);
    expect(assignmentTtlMs(undefined, 30_000)).toBe(30_000);
    expect(assignmentTtlMs(100, 2000)).toBe(2000);
    expect(assignmentTtlMs(1000, 2000)).toBe(3000);
  });
});
