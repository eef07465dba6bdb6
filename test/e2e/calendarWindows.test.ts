// Calendar windows as a caller sees them: budgets that reset at local midnight or on the 1st, in a
// zone, as long as that day or month really is, on the in-memory store and on Redis, with the
// service's clock moved by hand (CLOCK=local). And, on each store, a check whose boundaries were
// computed before midnight and decided after it counts in the new day.
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import type { RateLimitResponseObject } from '@tollgate/client';
import { calendarBounds, type Calendar } from '../../src/rules/calendar.js';
import { createMemoryStore } from '../../src/store/memoryStore.js';
import type { CounterCheck, Store } from '../../src/store/Store.js';
import { CALL_PATHS, openPathStore, startRedis, type TestRedis } from '../support/redis.js';
import {
  d,
  manualClock,
  resetMs,
  startTollgate,
  type ManualClock,
  type Tollgate,
} from '../support/tollgate.js';

const RULES = `
domain: budgets
descriptors:
  - key: sydney
    rate_limit: {calendar: day, time_zone: Australia/Sydney, requests_per_unit: 10}
  - key: paris
    rate_limit: {calendar: day, time_zone: Europe/Paris, requests_per_unit: 10}
  - key: monthly
    rate_limit: {calendar: month, requests_per_unit: 10}
  - key: weekly
    rate_limit: {calendar: week, time_zone: America/New_York, requests_per_unit: 10}
`;

let redis: TestRedis;
beforeAll(async () => {
  redis = await startRedis();
});
afterAll(async () => {
  await redis?.stop();
});

describe.each(['memory', 'redis'])('calendar windows on the %s store', (store) => {
  let tollgate: Tollgate | undefined;
  afterEach(async () => {
    await tollgate?.stop();
    tollgate = undefined;
  });
  async function at(instant: string): Promise<ManualClock> {
    if (store === 'redis') await redis.client.flushall();
    const clock = manualClock(Date.parse(instant));
    tollgate = await startTollgate({
      rules: RULES,
      clock,
      ...(store === 'redis' ? { redisUrl: redis.url } : {}),
    });
    return clock;
  }
  const charge = async (key: string, hits = 1) => {
    const response: RateLimitResponseObject = await (tollgate as Tollgate).check({
      domain: 'budgets',
      descriptors: [{ ...d(key, 'tenant'), hits_addend: { value: String(hits) } }],
    });
    const status = response.statuses?.[0] ?? {};
    return {
      code: status.code,
      left: status.limit_remaining,
      resetMs: resetMs(status),
      unit: status.current_limit?.unit,
    };
  };

  it('resets a Sydney day at local midnight, and the day DST ends lasts 25 hours', async () => {
    // Local midnight of 5 April 2026 is 13:00 UTC (AEDT, +11); that day ends at 14:00 UTC (AEST).
    const clock = await at('2026-04-04T13:00:00Z');
    expect(await charge('sydney', 4)).toEqual({
      code: 'OK',
      left: 6,
      resetMs: 25 * 3_600_000,
      unit: 'DAY',
    });
    clock.advance(24 * 3_600_000);
    // 23:00 local: the same day, an hour left.
    expect(await charge('sydney')).toMatchObject({ left: 5, resetMs: 3_600_000 });
    clock.advance(3_600_000 - 1);
    expect(await charge('sydney')).toMatchObject({ left: 4, resetMs: 1 });
    clock.advance(1);
    expect(await charge('sydney')).toMatchObject({ left: 9, resetMs: 24 * 3_600_000 });
  });

  it('resets a Paris day at local midnight on the day clocks go back', async () => {
    // 25 October 2026 runs from 22:00 UTC on the 24th to 23:00 UTC on the 25th.
    const clock = await at('2026-10-25T22:30:00Z');
    expect(await charge('paris', 10)).toMatchObject({ left: 0, resetMs: 30 * 60_000 });
    expect(await charge('paris')).toMatchObject({ code: 'OVER_LIMIT', resetMs: 30 * 60_000 });
    clock.advance(30 * 60_000);
    expect(await charge('paris')).toMatchObject({ code: 'OK', left: 9 });
  });

  it('keeps a month through February 29 and resets on March 1', async () => {
    const clock = await at('2028-02-28T12:00:00Z');
    expect(await charge('monthly', 7)).toMatchObject({ left: 3, unit: 'MONTH' });
    clock.advance(24 * 3_600_000);
    expect(await charge('monthly')).toMatchObject({ left: 2, resetMs: 12 * 3_600_000 });
    clock.advance(12 * 3_600_000);
    expect(await charge('monthly')).toMatchObject({ left: 9, resetMs: 31 * 24 * 3_600_000 });
  });

  it('starts a week on Monday at local midnight', async () => {
    // Sunday 6 December 2026, 23:59:59.999 in New York (EST, -5).
    const clock = await at('2026-12-07T04:59:59.999Z');
    expect(await charge('weekly', 10)).toMatchObject({ left: 0, resetMs: 1, unit: 'WEEK' });
    clock.advance(1);
    expect(await charge('weekly')).toMatchObject({ left: 9, resetMs: 7 * 24 * 3_600_000 });
  });
});

describe('calendar counters on Redis', () => {
  it('are keyed on the zone as the rules wrote it', async () => {
    await redis.client.flushall();
    const tollgate = await startTollgate({ rules: RULES, redisUrl: redis.url });
    try {
      await tollgate.check({ domain: 'budgets', descriptors: [d('sydney', 'tenant')] });
      const keys = (await redis.client.keys('*')).filter((key) => !/tg:\{probe/.test(key));
      expect(keys).toHaveLength(1);
      expect(keys[0]).toMatch(/\|fw:day@Australia\/Sydney$/);
    } finally {
      await tollgate.stop();
    }
  });
});

describe("calendar windows on Redis's own clock (CLOCK=redis)", () => {
  it('reset at the next midnight of the zone, as Redis TIME has it', async () => {
    await redis.client.flushall();
    const tollgate = await startTollgate({
      rules: RULES,
      redisUrl: redis.url,
      env: { CLOCK: 'redis' },
    });
    try {
      // Not within seconds of Paris's midnight, where the call and this reading could straddle it.
      const [, , next] = calendarBounds({ period: 'day', zone: 'Europe/Paris' }, Date.now());
      if ((next as number) - Date.now() < 10_000) {
        await new Promise((resolve) => setTimeout(resolve, (next as number) - Date.now() + 100));
      }
      const response = await tollgate.check({ domain: 'budgets', descriptors: [d('paris', 't')] });
      const now = Date.now();
      const [, , midnight] = calendarBounds({ period: 'day', zone: 'Europe/Paris' }, now);
      expect(response.statuses?.[0]?.limit_remaining).toBe(9);
      // Redis and this process share a clock; the call took some milliseconds.
      const reset = resetMs(response.statuses?.[0] ?? {}) as number;
      expect(Math.abs(reset - ((midnight as number) - now))).toBeLessThan(5_000);
    } finally {
      await tollgate.stop();
    }
  });
});

describe('a check whose boundaries were computed before midnight and decided after it', () => {
  const calendar: Calendar = { period: 'day', zone: 'Australia/Sydney' };
  // Local midnight of 10 June 2026 (AEST, +10).
  const MIDNIGHT = Date.parse('2026-06-09T14:00:00Z');
  const check = (key: string, bounds: readonly number[]): CounterCheck => ({
    key,
    algorithm: 'fixed_window',
    windowMs: 86_400_000,
    limit: 10,
    burst: 10,
    cost: 3,
    shadow: false,
    quota: false,
    overdraw: false,
    calendar,
    bounds,
  });
  const stores: [string, () => Promise<Store>][] = [
    ['memory', async () => createMemoryStore()],
    ...CALL_PATHS.map((path): [string, () => Promise<Store>] => [
      `Redis (${path})`,
      () => openPathStore(redis, path),
    ]),
  ];

  it.each(stores)('counts in the day the store saw, on %s', async (name, open) => {
    const store = await open();
    try {
      const key = `cal:{${name}}`;
      const before = calendarBounds(calendar, MIDNIGHT - 1_000);
      expect((await store.decide([check(key, before)], MIDNIGHT - 2_000)).results[0]).toEqual({
        fits: true,
        remaining: 7,
        resetMs: 2_000,
      });
      // Computed a second before midnight, decided five seconds after it.
      expect((await store.decide([check(key, before)], MIDNIGHT + 5_000)).results[0]).toEqual({
        fits: true,
        remaining: 7,
        resetMs: 24 * 3_600_000 - 5_000,
      });
    } finally {
      await store.close();
    }
  });
});
