import fc from 'fast-check';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { RateLimitResponseObject } from '@tollgate/client';
import { startRedis, type TestRedis } from '../support/redis.js';
import {
  codes,
  d,
  manualClock,
  resetMs,
  startTollgate,
  type ManualClock,
  type Tollgate,
} from '../support/tollgate.js';

// CLOCK=local with clocks that disagree: two instances share one Redis, one of them 40 s ahead.
// Each counter remembers the latest time any instance decided it at, and an instance whose clock
// is behind is raised to that time, so a counter's time never runs backwards. A lagging instance
// therefore cannot reopen a window, slide one back or refill a bucket that a leading instance
// has already spent, which is how clock skew makes a naive limiter over-admit.

const RULES = `
domain: skew
descriptors:
  - key: fixed
    rate_limit: {unit: minute, requests_per_unit: 10, algorithm: fixed_window}
  - key: sliding
    rate_limit: {unit: minute, requests_per_unit: 10, algorithm: sliding_window}
  - key: bucket
    rate_limit: {unit: minute, requests_per_unit: 10, algorithm: token_bucket}
  - key: short
    rate_limit: {unit: second, requests_per_unit: 10, algorithm: fixed_window}
`;
const SKEW_MS = 40_000;
// 12:00:30 on the lagging clock, so the leading one (12:01:10) is already in the next minute.
const LAGGING_START = Date.UTC(2030, 0, 1, 12, 0, 30);

let redis: TestRedis;
let ahead: Tollgate;
let behind: Tollgate;

beforeAll(async () => {
  redis = await startRedis();
  ahead = await startTollgate({
    rules: RULES,
    redisUrl: redis.url,
    clock: manualClock(LAGGING_START + SKEW_MS),
  });
  behind = await startTollgate({
    rules: RULES,
    redisUrl: redis.url,
    clock: manualClock(LAGGING_START),
  });
});

afterAll(async () => {
  await ahead?.stop();
  await behind?.stop();
  await redis?.stop();
});

const hit = (instance: Tollgate, key: string, value: string, hits = 1) =>
  instance.check({ domain: 'skew', descriptors: [d(key, value)], hits_addend: hits });

async function allowedOf(instance: Tollgate, key: string, value: string, requests: number) {
  let allowed = 0;
  for (let i = 0; i < requests; i += 1) {
    if ((await hit(instance, key, value)).overall_code === 'OK') allowed += 1;
  }
  return allowed;
}

function advanceBoth(ms: number) {
  ahead.clock.advance(ms);
  behind.clock.advance(ms);
}

describe.each(['fixed', 'sliding', 'bucket'])('%s: two instances 40 s apart', (key) => {
  it('the lagging instance cannot spend again what the leading one spent', async () => {
    const value = `lead-${key}`;
    expect(await allowedOf(ahead, key, value, 12)).toBe(10);
    // On its own clock the lagging instance is in the previous minute, before any of that
    // spending: a limiter that trusted its clock would admit 10 more here.
    expect(await allowedOf(behind, key, value, 12)).toBe(0);
    const denied = await hit(behind, key, value);
    // It reports the reset on the counter's time, the same as the leading instance does.
    const leading = await hit(ahead, key, value);
    expect(resetMs(denied.statuses![0]!)).toBe(resetMs(leading.statuses![0]!));
  });

  it('the leading instance moves the counter on by the skew, once', async () => {
    const value = `lag-${key}`;
    expect(await allowedOf(behind, key, value, 12)).toBe(10);
    // To the counter, the leading instance's first check is 40 s later, at 12:01:10: a fixed
    // window is in its next minute (10 fit); a sliding window still weighs the 10 of the minute
    // before by 50/60 (8.33, so 1 fits); a bucket has refilled 40 s at 10 a minute (6.67 tokens,
    // so 6 fit). That is what the counter's own timeline allows, and it happens once: from now
    // on the lagging instance decides at the counter's time, which moves only as fast as the
    // leading clock does.
    expect(await allowedOf(ahead, key, value, 12)).toBe({ fixed: 10, sliding: 1, bucket: 6 }[key]);
    expect(await allowedOf(behind, key, value, 3)).toBe(0);
    advanceBoth(1_000);
    expect(await allowedOf(behind, key, value, 3)).toBe(0);
  });
});

describe('a counter past its window', () => {
  // The counter's key outlives its window by CLOCK_SKEW_TOLERANCE (in Redis's time, which the
  // manual clocks do not move). Gone any earlier, it would no longer hold the leading time, and
  // an instance whose clock still shows that window would count it afresh.
  async function lagAfterExpiry(tolerance: string) {
    const start = Date.UTC(2030, 0, 1, 12, 0, 0);
    const env = { CLOCK_SKEW_TOLERANCE: tolerance };
    const leading = await startTollgate({
      rules: RULES,
      redisUrl: redis.url,
      env,
      clock: manualClock(start + 3_000),
    });
    const lagging = await startTollgate({
      rules: RULES,
      redisUrl: redis.url,
      env,
      clock: manualClock(start),
    });
    try {
      const value = `expiry-${tolerance}`;
      expect(await allowedOf(leading, 'short', value, 12)).toBe(10);
      // The one-second window ends on the leading clock within a second; wait past that and
      // the default slack of earlier versions (1 s), in real time.
      await new Promise((resolve) => setTimeout(resolve, 2_500));
      return await allowedOf(lagging, 'short', value, 12);
    } finally {
      await Promise.all([leading.stop(), lagging.stop()]);
    }
  }

  it('is kept long enough that a lagging instance, 3 s behind, cannot reopen it', async () => {
    expect(await lagAfterExpiry('5s')).toBe(0);
  });

  it('is reopened by that instance when the tolerance is below the skew, as README warns', async () => {
    expect(await lagAfterExpiry('0s')).toBe(10);
  });
});

describe('random traces on two skewed clocks', () => {
  it('decide exactly as one instance on the latest time either clock has shown', async () => {
    // The reference: one instance on the in-memory store, whose clock reads, at each check, the
    // later of the checking instance's clock and the latest time the counter was written at. The over-limit cache is off on all three: a lagging instance's cache
    // may hold a denial up to the skew longer than the counter needs, which only under-admits,
    // but it would make the comparison inexact.
    const off = { OVER_LIMIT_CACHE_SIZE: '0' };
    const clocks: ManualClock[] = [manualClock(), manualClock()];
    const pair = await Promise.all(
      clocks.map((clock) => startTollgate({ rules: RULES, redisUrl: redis.url, clock, env: off })),
    );
    const referenceClock = manualClock();
    const reference = await startTollgate({ rules: RULES, clock: referenceClock, env: off });
    let run = 0;
    try {
      await fc.assert(
        fc.asyncProperty(
          fc.constantFrom('fixed', 'sliding', 'bucket'),
          fc.integer({ min: -90_000, max: 90_000 }),
          fc.array(
            fc.record({
              instance: fc.constantFrom(0, 1),
              advanceMs: fc.oneof(
                fc.integer({ min: 0, max: 100 }),
                fc.integer({ min: 0, max: 30_000 }),
              ),
              hits: fc.integer({ min: 0, max: 4 }),
            }),
            { minLength: 1, maxLength: 30 },
          ),
          async (key, skewMs, steps) => {
            run += 1;
            const start = Date.UTC(2030, 0, 1) + run * 86_400_000 + 12_345;
            clocks[0]!.now = start;
            clocks[1]!.now = start + skewMs;
            // The latest time a check wrote the counter at: a check decides at the later of
            // that and its own clock. Only a check that consumes writes.
            let written = -Infinity;
            for (const { instance, advanceMs, hits } of steps) {
              clocks[0]!.advance(advanceMs);
              clocks[1]!.advance(advanceMs);
              const at = Math.max(written, clocks[instance]!.now);
              referenceClock.now = at;
              const request = {
                domain: 'skew',
                descriptors: [d(key, `trace-${run}`)],
                hits_addend: hits,
              };
              const [got, want] = await Promise.all([
                pair[instance]!.check(request),
                reference.check(request),
              ]);
              expect(decision(got)).toEqual(decision(want));
              if (got.overall_code === 'OK' && hits > 0) written = at;
            }
          },
        ),
        { numRuns: 120 },
      );
    } finally {
      await Promise.all([...pair, reference].map((instance) => instance.stop()));
    }
  }, 120_000);
});

function decision(response: RateLimitResponseObject) {
  const status = response.statuses![0]!;
  return { codes: codes(response), remaining: status.limit_remaining, resetMs: resetMs(status) };
}
