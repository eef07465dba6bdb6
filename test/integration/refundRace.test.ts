import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { RateLimitRequestObject } from '@tollgate/client';
import { monitorRedis, startRedis, type TestRedis } from '../support/redis.js';
import { d, eventually, manualClock, startTollgate, type Tollgate } from '../support/tollgate.js';
import { raceRules } from '../support/raceRules.js';

// Charges and refunds at once on one counter: 500 callers each charge, and if admitted give back
// part of the charge, twice over: up to 2,000 calls in all, spread over two instances on one
// Redis (one calling functions, one sending scripts) on one frozen clock. Every refund follows
// its own charge, so the count never has less to give back than a refund asks, and what is left
// at the end is the limit less what was admitted and not given back, in every algorithm.
//
// Then in any order: 2,000 charges and refunds sent all at once, so that refunds often come
// before any charge they could give back. Each call's cost is unique, so Redis's MONITOR, which
// lists commands in the order Redis runs them, gives the order the store applied them in; a
// replay in that order on a plain counter gives every answer and the final count.

const LIMIT = 1_000;
const CALLERS = 500;
const ROUNDS = 2;
// The any-order test's counters: 2,000 calls of about 7 million each against 2 billion.
const ANY_LIMIT = 2_000_000_000;
const ANY_CALLS = 2_000;
const ANY_BASE = 7_000_000;
const RULES = raceRules(
  'refunds',
  LIMIT,
  ['fixed_window', 'sliding_window', 'token_bucket']
    .map(
      (algorithm) => `  - key: any_${algorithm}
    rate_limit: {unit: hour, requests_per_unit: ${ANY_LIMIT}, algorithm: ${algorithm}}`,
    )
    .join('\n'),
);

let redis: TestRedis;
const instances: Tollgate[] = [];
beforeAll(async () => {
  redis = await startRedis();
  const clock = manualClock();
  for (const functions of ['on', 'off']) {
    instances.push(
      await startTollgate({
        rules: RULES,
        redisUrl: redis.url,
        clock,
        env: { REDIS_FUNCTIONS: functions, REDIS_TIMEOUT: '5s' },
      }),
    );
  }
}, 60_000);
afterAll(async () => {
  for (const instance of instances) await instance.stop();
  await redis?.stop();
});

/** A deterministic spread of small numbers: caller i's charge and refund. */
const charge = (i: number) => 1 + ((i * 7) % 4);
const refund = (i: number) => (i * 13) % (charge(i) + 1);

describe.each(['fixed', 'sliding', 'bucket'])('%s', (key) => {
  it(`leaves the limit less what was admitted and not given back, of up to ${2 * ROUNDS * CALLERS} calls from ${CALLERS} callers at once`, async () => {
    const request = (hits: number, negative: boolean): RateLimitRequestObject => ({
      domain: 'refunds',
      descriptors: [
        {
          ...d(key, 'hot'),
          hits_addend: { value: String(hits) },
          ...(negative ? { is_negative_hits: true } : {}),
        },
      ],
    });
    /** Call n: a charge and, if admitted, a refund of part of it on the other instance. */
    const call = async (n: number) => {
      const instance = instances[n % instances.length]!;
      const charged = await instance.check(request(charge(n), false), 30_000);
      if (charged.overall_code !== 'OK') return { admitted: 0, refunded: 0 };
      const other = instances[(n + 1) % instances.length]!;
      const back = await other.check(request(refund(n), true), 30_000);
      expect(back.overall_code).toBe('OK');
      return { admitted: charge(n), refunded: refund(n) };
    };
    // Every caller's rounds one after another, the callers all at once.
    const outcomes = (
      await Promise.all(
        Array.from({ length: CALLERS }, async (_, i) => {
          const rounds = [];
          for (let round = 0; round < ROUNDS; round++) rounds.push(await call(i + round * CALLERS));
          return rounds;
        }),
      )
    ).flat();
    const admitted = outcomes.reduce((sum, o) => sum + o.admitted, 0);
    const refunded = outcomes.reduce((sum, o) => sum + o.refunded, 0);
    // More was asked than the limit, and refunds let more in than the limit alone would.
    expect(outcomes.some((o) => o.admitted === 0)).toBe(true);
    expect(admitted).toBeGreaterThan(LIMIT);
    const peek = await instances[0]!.check(request(0, false));
    expect(peek.statuses?.[0]?.limit_remaining).toBe(LIMIT - (admitted - refunded));
  }, 60_000);
});

describe.each(['fixed_window', 'sliding_window', 'token_bucket'])('%s', (algorithm) => {
  it(`answers ${ANY_CALLS} charges and refunds sent at once as a replay in the order Redis applied them`, async () => {
    const key = `any_${algorithm}`;
    // The first 100 calls are refunds, then every third: refunds come before charges and among
    // them, and the charges outrun the limit. Call i costs ANY_BASE + i + 1, which no other
    // argument of a decision call (windows, limits, times, flags) can equal.
    const calls = Array.from({ length: ANY_CALLS }, (_, i) => ({
      refund: i < 100 || i % 3 === 2,
      cost: ANY_BASE + i + 1,
    }));
    const byCost = new Map(calls.map((call, i) => [String(call.cost), i]));
    const applied: number[] = [];
    const monitor = await monitorRedis(redis, (args) => {
      // The calls the service sends, not the commands their scripts run (an HSET may write a
      // count equal to a cost). A call's last appearance is the one Redis ran: a retry follows
      // a failed attempt.
      if (!/^(FCALL|EVALSHA|EVAL)$/i.test(args[0] ?? '')) return;
      for (const arg of args) {
        const i = byCost.get(arg);
        if (i !== undefined) applied.push(i);
      }
    });
    let answers;
    try {
      answers = await Promise.all(
        calls.map((call, i) =>
          instances[i % instances.length]!.check(
            {
              domain: 'refunds',
              descriptors: [
                {
                  ...d(key, 'any-order'),
                  hits_addend: { value: String(call.cost) },
                  ...(call.refund ? { is_negative_hits: true } : {}),
                },
              ],
            },
            30_000,
          ),
        ),
      );
      await eventually(async () => new Set(applied).size === ANY_CALLS, 20_000);
    } finally {
      monitor.close();
    }
    const last = new Map<number, number>();
    applied.forEach((call, position) => last.set(call, position));
    const order = [...last.entries()].sort((a, b) => a[1] - b[1]).map(([call]) => call);

    // The replay: a plain count, on a frozen clock inside one window.
    let count = 0;
    let denied = 0;
    let floored = 0;
    const expected = new Map<number, { code: string; remaining?: number }>();
    for (const i of order) {
      const { refund, cost } = calls[i]!;
      if (refund) {
        if (count < cost) floored++;
        count = Math.max(0, count - cost);
        expected.set(i, { code: 'OK', remaining: ANY_LIMIT - count });
      } else if (count + cost <= ANY_LIMIT) {
        count += cost;
        expected.set(i, { code: 'OK', remaining: ANY_LIMIT - count });
      } else {
        denied++;
        expected.set(i, { code: 'OVER_LIMIT' });
      }
    }
    // The order mattered: some refunds found less than they asked, and some charges were denied.
    expect(floored).toBeGreaterThan(0);
    expect(denied).toBeGreaterThan(0);
    const observed = answers.map((answer) => {
      const status = answer.statuses?.[0];
      const code = status?.code ?? '';
      return code === 'OK' ? { code, remaining: status?.limit_remaining } : { code };
    });
    expect(observed).toEqual(calls.map((_, i) => expected.get(i)));

    const peek = await instances[0]!.check({
      domain: 'refunds',
      descriptors: [{ ...d(key, 'any-order'), hits_addend: { value: '0' } }],
    });
    expect(peek.statuses?.[0]?.limit_remaining).toBe(ANY_LIMIT - count);
  }, 90_000);
});
