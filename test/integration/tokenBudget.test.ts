// The token-budget flow of envoy/envoy-token-budget.yaml, played as Envoy plays it against the
// real service on a real Redis, with its own rules file (envoy/token-budget.yaml): for each
// request a peek on the request path, then, once the reply is done, one call with the charge of
// the tokens it used and the refund of those it did not bill. Many tenants at once, each reply
// charged in full past the budget; at the end every tenant's counter holds exactly what its
// admitted replies used less what they refunded.
import { readFileSync } from 'node:fs';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { RateLimitRequestObject } from '@tollgate/client';
import { startRedis, type TestRedis } from '../support/redis.js';
import { d, manualClock, startTollgate, type Tollgate } from '../support/tollgate.js';

const RULES = readFileSync('envoy/token-budget.yaml', 'utf8');
const BUDGET = 1_000_000;
const TENANTS = 20;
const REQUESTS = 60;

let redis: TestRedis;
const instances: Tollgate[] = [];
beforeAll(async () => {
  redis = await startRedis();
  // Noon in Paris, well inside one calendar day; two instances on one Redis and one clock.
  const clock = manualClock(Date.parse('2026-12-04T11:00:00Z'));
  for (let i = 0; i < 2; i++) {
    instances.push(await startTollgate({ rules: RULES, redisUrl: redis.url, clock }));
  }
}, 60_000);
afterAll(async () => {
  for (const instance of instances) await instance.stop();
  await redis?.stop();
});

const tenant = (t: number) => d('tenant', `tenant-${t}`);
/** A reply's tokens: big enough that the busiest tenants spend their day's budget. */
const used = (t: number, n: number) =>
  2_000 + ((t * 7_919 + n * 104_729) % (t < 5 ? 90_000 : 9_000));
const unbilled = (t: number, n: number) => (t * 31 + n * 17) % 1_500;

function call(instance: Tollgate, descriptors: NonNullable<RateLimitRequestObject['descriptors']>) {
  return instance.check({ domain: 'llm', descriptors }, 30_000);
}

describe('LLM token budgets, as envoy/envoy-token-budget.yaml sends them', () => {
  it('leave every tenant exactly its admitted usage less its refunds', async () => {
    const outcomes = await Promise.all(
      Array.from({ length: TENANTS }, async (_, t) => {
        let charged = 0;
        let refunded = 0;
        let refusedAt: number | undefined;
        for (let n = 0; n < REQUESTS; n++) {
          const instance = instances[(t + n) % instances.length] as Tollgate;
          // 1. The peek on the request path.
          const peek = await call(instance, [{ ...tenant(t), hits_addend: { value: '0' } }]);
          if (peek.overall_code !== 'OK') {
            refusedAt ??= charged - refunded;
            continue;
          }
          // 2 and 3, once the reply is done: Envoy sends both descriptors in one call.
          const done = await call(instance, [
            { ...tenant(t), hits_addend: { value: String(used(t, n)) } },
            {
              ...tenant(t),
              hits_addend: { value: String(unbilled(t, n)) },
              is_negative_hits: true,
            },
          ]);
          // Stream-done answers are Envoy's fire-and-forget: only the refund's is always OK.
          expect(done.statuses?.[1]?.code).toBe('OK');
          charged += used(t, n);
          refunded += unbilled(t, n);
        }
        return { charged, refunded, refusedAt };
      }),
    );
    for (const [t, { charged, refunded, refusedAt }] of outcomes.entries()) {
      const peek = await call(instances[0] as Tollgate, [
        { ...tenant(t), hits_addend: { value: '0' } },
      ]);
      const net = charged - refunded;
      expect(peek.statuses?.[0]?.limit_remaining, `tenant ${t}`).toBe(Math.max(0, BUDGET - net));
      // A tenant was refused only once its day's usage had reached the budget.
      if (refusedAt !== undefined) expect(refusedAt, `tenant ${t}`).toBeGreaterThanOrEqual(BUDGET);
    }
    // The busiest tenants spent their budget and were refused, the others never.
    expect(outcomes.slice(0, 5).every((o) => o.refusedAt !== undefined)).toBe(true);
    expect(outcomes.slice(5).every((o) => o.refusedAt === undefined)).toBe(true);
    // Counted past the budget, not forgiven: a busy tenant's usage passed it.
    expect(Math.max(...outcomes.map((o) => o.charged - o.refunded))).toBeGreaterThan(BUDGET);
  }, 120_000);
});
