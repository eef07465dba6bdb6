import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { RateLimitRequestObject } from '@tollgate/client';
import { startRedis, type TestRedis } from '../support/redis.js';
import { d, manualClock, startTollgate, type Tollgate } from '../support/tollgate.js';
import { raceRules } from '../support/raceRules.js';

// Charges and refunds at once on one counter: 500 callers each charge, and if admitted give back
// part of the charge, twice over: up to 2,000 calls in all, spread over two instances on one
// Redis (one calling functions, one sending scripts) on one frozen clock. Every refund follows
// its own charge, so the count never has less to give back than a refund asks, and what is left
// at the end is the limit less what was admitted and not given back, in every algorithm.

const LIMIT = 1_000;
const CALLERS = 500;
const ROUNDS = 2;
const RULES = raceRules('refunds', LIMIT);

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
