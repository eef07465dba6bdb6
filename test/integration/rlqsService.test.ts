// `tollgate serve`'s own RLQS: the service as it starts from its settings, on the in-memory store
// and on a real redis-server. RLQS reports and classic checks reach the same counters, the
// stream's health follows the store's, and its metrics count what it did.
import * as grpc from '@grpc/grpc-js';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { readSettings } from '../../src/process/settings.js';
import { metricValue } from '../support/metrics.js';
import { startRedis, type TestRedis } from '../support/redis.js';
import { openRlqs, rlqsHealth, usageReport } from '../support/rlqsClient.js';
import { codes, d, manualClock, startTollgate, type Tollgate } from '../support/tollgate.js';

const RULES = `
domain: quota
descriptors:
  - key: tenant
    rate_limit: {unit: minute, requests_per_unit: 600, algorithm: fixed_window}
`;

let redis: TestRedis;
beforeAll(async () => {
  redis = await startRedis();
});
afterAll(async () => {
  await redis?.stop();
});

const tokenBucketOf = (response: Record<string, unknown>) =>
  (
    response as {
      bucket_action: {
        quota_assignment_action?: { rate_limit_strategy?: { token_bucket?: object } };
      }[];
    }
  ).bucket_action[0]?.quota_assignment_action?.rate_limit_strategy?.token_bucket;

describe.each([
  ['in memory', () => undefined],
  ['on Redis', () => redis.url],
])('RLQS in tollgate serve, %s', (_name, url) => {
  let tollgate: Tollgate;
  beforeAll(async () => {
    // Half a minute into the rule's window: a report's requests came within it, not before it
    // (a report at a window's start carries what its stream admitted in the window before).
    tollgate = await startTollgate({
      rules: RULES,
      redisUrl: url(),
      clock: manualClock(Date.UTC(2030, 0, 1, 0, 0, 30)),
    });
  });
  afterAll(async () => {
    await tollgate?.stop();
  });

  it('charges reports, and what their clients will admit, to the counters classic checks use', async () => {
    const rlqs = openRlqs(tollgate.address);
    try {
      // 500 of the tenant's 600 a minute, and what the client will admit at its 9.9 a second
      // until its next report, a second away (at most 10), charged ahead.
      rlqs.stream.write(usageReport({ tenant: 'shared' }, 500, 'quota'));
      expect(tokenBucketOf(await rlqs.next())).toBeDefined();
      let classic = 0;
      for (; classic <= 100; classic++) {
        const response = await tollgate.check({
          domain: 'quota',
          descriptors: [d('tenant', 'shared')],
        });
        if (codes(response)[0] !== 'OK') break;
      }
      expect(classic).toBeGreaterThanOrEqual(90);
      expect(classic).toBeLessThanOrEqual(100);
      // The window is filled: the client keeps what it was charged ahead of it, as a lower rate
      // to the window's end.
      rlqs.stream.write(usageReport({ tenant: 'shared' }, 0));
      const graded = tokenBucketOf(await rlqs.next()) as
        { tokens_per_fill: { value: number }; fill_interval: { seconds: string } } | undefined;
      expect(graded).toBeDefined();
      const rate = graded!.tokens_per_fill.value / Number(graded!.fill_interval.seconds);
      expect(rate).toBeGreaterThan(0);
      expect(rate).toBeLessThan(9.9);
      // Once it has admitted that (at most 10), it is denied until the window rolls over.
      rlqs.stream.write(usageReport({ tenant: 'shared' }, 10));
      expect(await rlqs.next()).toMatchObject({
        bucket_action: [
          { quota_assignment_action: { rate_limit_strategy: { blanket_rule: 'DENY_ALL' } } },
        ],
      });
    } finally {
      rlqs.close();
    }
  });

  it('is healthy under its own name, and counts streams, reports and assignments', async () => {
    expect(await rlqsHealth(tollgate.address)).toBe('SERVING');
    const rlqs = openRlqs(tollgate.address);
    try {
      rlqs.stream.write(usageReport({ tenant: 'metrics' }, 3, 'quota', 1));
      await rlqs.next();
      const text = await (await fetch(`${tollgate.httpUrl}/metrics`)).text();
      expect(metricValue(text, 'tollgate_rlqs_streams')).toBe(1);
      expect(metricValue(text, 'tollgate_rlqs_buckets')).toBe(1);
      expect(metricValue(text, 'tollgate_rlqs_reports_total')).toBeGreaterThanOrEqual(1);
      expect(
        metricValue(text, 'tollgate_rlqs_requests_reported_total', { result: 'denied' }),
      ).toBeGreaterThanOrEqual(1);
      expect(
        metricValue(text, 'tollgate_rlqs_assignments_total', { action: 'token_bucket' }),
      ).toBeGreaterThanOrEqual(1);
    } finally {
      rlqs.close();
    }
  });
});

describe('RLQS settings in tollgate serve', () => {
  it('is not offered with RLQS_ENABLED=false', async () => {
    const tollgate = await startTollgate({ rules: RULES, env: { RLQS_ENABLED: 'false' } });
    const rlqs = openRlqs(tollgate.address);
    try {
      rlqs.stream.write(usageReport({ tenant: 'a' }, 1, 'quota'));
      expect((await rlqs.ended).code).toBe(grpc.status.UNIMPLEMENTED);
      expect(await rlqsHealth(tollgate.address).catch((e: grpc.ServiceError) => e.code)).toBe(
        grpc.status.NOT_FOUND,
      );
    } finally {
      rlqs.close();
      await tollgate.stop();
    }
  });

  it('tells an unmatched bucket RLQS_UNMATCHED_ACTION, and names a bad value', async () => {
    expect(() => readSettings({ RLQS_UNMATCHED_ACTION: 'maybe' })).toThrow(/RLQS_UNMATCHED_ACTION/);
    const tollgate = await startTollgate({ rules: RULES, env: { RLQS_UNMATCHED_ACTION: 'deny' } });
    const rlqs = openRlqs(tollgate.address);
    try {
      rlqs.stream.write(usageReport({ team: 'x' }, 1, 'quota'));
      expect(await rlqs.next()).toMatchObject({
        bucket_action: [
          { quota_assignment_action: { rate_limit_strategy: { blanket_rule: 'DENY_ALL' } } },
        ],
      });
    } finally {
      rlqs.close();
      await tollgate.stop();
    }
  });

  it('ends a stale stream and one past its reports a second, naming the settings', async () => {
    const tollgate = await startTollgate({
      rules: RULES,
      env: { RLQS_STALE_STREAM: '1s', RLQS_MAX_REPORTS_PER_SECOND: '1' },
    });
    const quiet = openRlqs(tollgate.address);
    const chatty = openRlqs(tollgate.address);
    try {
      quiet.stream.write(usageReport({ tenant: 'a' }, 1, 'quota'));
      await quiet.next();
      // A burst of 5 seconds' worth, then one report too many.
      for (let n = 0; n < 7; n++) chatty.stream.write(usageReport({ tenant: 'b' }, 1, 'quota'));
      const flooded = await chatty.ended;
      expect(flooded.code).toBe(grpc.status.RESOURCE_EXHAUSTED);
      expect(flooded.details).toMatch(
        /more than 1 usage reports a second, RLQS_MAX_REPORTS_PER_SECOND/,
      );
      const stale = await quiet.ended;
      expect(stale.code).toBe(grpc.status.CANCELLED);
      expect(stale.details).toMatch(/no usage report for 1000 ms, RLQS_STALE_STREAM/);
      const text = await (await fetch(`${tollgate.httpUrl}/metrics`)).text();
      expect(metricValue(text, 'tollgate_bounds_reached_total', { bound: 'rlqs_reports' })).toBe(1);
      expect(metricValue(text, 'tollgate_bounds_reached_total', { bound: 'rlqs_stale' })).toBe(1);
      expect(metricValue(text, 'tollgate_rlqs_streams')).toBe(0);
    } finally {
      quiet.close();
      chatty.close();
      await tollgate.stop();
    }
  });

  it('follows the store: NOT_SERVING and UNAVAILABLE while Redis is down', async () => {
    const own = await startRedis();
    const tollgate = await startTollgate({
      rules: RULES,
      redisUrl: own.url,
      healthIntervalMs: 100,
    });
    try {
      expect(await rlqsHealth(tollgate.address)).toBe('SERVING');
      await own.stop();
      await expect
        .poll(() => rlqsHealth(tollgate.address), { timeout: 10_000 })
        .toBe('NOT_SERVING');
      const rlqs = openRlqs(tollgate.address);
      rlqs.stream.write(usageReport({ tenant: 'a' }, 1, 'quota'));
      const status = await rlqs.ended;
      rlqs.close();
      expect(status.code).toBe(grpc.status.UNAVAILABLE);
      expect(status.details).toMatch(/redis/);
    } finally {
      await tollgate.stop();
    }
  });
});
