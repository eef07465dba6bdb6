// What one RLQS client's reports can do to the others, on the in-memory store and on Redis: a
// report is held to what its client could have seen (src/rlqs/trust.ts). Each case is an attack
// that moved shared state before: a stream claiming huge denials took a tenant's share from its
// legitimate client, a time_elapsed of 10^9 s kept demand and assignments for decades, and a
// report of 2^64 - 1 allowed requests shut the tenant's classic checks out.
import * as grpc from '@grpc/grpc-js';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { metricValue } from '../support/metrics.js';
import { realClock } from '../support/rlqsFleet.js';
import { startRedis, type TestRedis } from '../support/redis.js';
import { firstAssignment, openRlqs, type RlqsTestStream } from '../support/rlqsClient.js';
import { codes, d, startTollgate, type Tollgate } from '../support/tollgate.js';

// 400 per 10 s: a rate of 40 a second, 36 of it handed out (a second of it is kept back).
const RULES = `
domain: quota
descriptors:
  - key: tenant
    rate_limit: {unit: second, requests_per_unit: 40, algorithm: fixed_window}
  - key: slow
    rate_limit: {unit: minute, requests_per_unit: 400, algorithm: fixed_window}
`;

let redis: TestRedis;
beforeAll(async () => {
  redis = await startRedis();
});
afterAll(async () => {
  await redis?.stop();
});

/** A report of one bucket; counts as strings, as a uint64 goes on the wire. */
function report(
  bucket: Record<string, string>,
  counts: { allowed?: string | number; denied?: string | number; elapsedSeconds?: number },
  domain?: string,
): object {
  return {
    ...(domain ? { domain } : {}),
    bucket_quota_usages: [
      {
        bucket_id: { bucket },
        time_elapsed: { seconds: counts.elapsedSeconds ?? 1 },
        num_requests_allowed: String(counts.allowed ?? 0),
        num_requests_denied: String(counts.denied ?? 0),
      },
    ],
  };
}

type Assignment = ReturnType<typeof firstAssignment>;

async function exchange(stream: RlqsTestStream, message: object): Promise<Assignment> {
  stream.stream.write(message);
  return firstAssignment(await stream.next());
}

describe.each([
  ['in memory', () => undefined],
  ['on Redis', () => redis.url],
])('RLQS reports held to what a client could have seen, %s', (_name, url) => {
  let tollgate: Tollgate;
  const streams: RlqsTestStream[] = [];
  const open = () => {
    const stream = openRlqs(tollgate.address);
    streams.push(stream);
    return stream;
  };
  beforeAll(async () => {
    if (url()) await redis.client.flushall();
    tollgate = await startTollgate({
      rules: RULES,
      redisUrl: url(),
      clock: realClock,
    });
  });
  afterAll(async () => {
    for (const stream of streams) stream.close();
    await tollgate?.stop();
  });

  it("keeps a legitimate client's share when another stream claims huge denials", async () => {
    // Demand is allowed plus denied: denied alone leaves the counter's window unspent.
    const honest = open();
    const domain = 'quota';
    let alone = await exchange(honest, report({ tenant: 'shared' }, { denied: 10 }, domain));
    for (let i = 0; i < 3; i++) {
      alone = await exchange(honest, report({ tenant: 'shared' }, { denied: 10 }));
    }
    expect(alone.rate).toBeGreaterThan(30);
    // Ten million denials a second is within what a report may claim, but no client can use
    // more than the whole rule: it counts as 36 a second, and the honest client keeps about
    // 10 / 46 of the rule, not 10 / 10,000,010.
    const loud = open();
    await exchange(loud, report({ tenant: 'shared' }, { denied: 9_999_999 }, domain));
    const kept = await exchange(honest, report({ tenant: 'shared' }, { denied: 10 }));
    expect(kept.rate).toBeGreaterThanOrEqual(5);
  });

  it('refuses a report of more denials than a second can hold, naming the field and the bound', async () => {
    const loud = open();
    loud.stream.write(report({ tenant: 'refused' }, { denied: 1e12 }, 'quota'));
    const status = await loud.ended;
    expect(status.code).toBe(grpc.status.INVALID_ARGUMENT);
    expect(status.details).toMatch(
      /bucket_quota_usages\[0\]\.num_requests_denied 1000000000000 is more than 10000000/,
    );
  });

  it('keeps demand and assignments for a few reporting intervals, whatever time_elapsed says', async () => {
    const stream = open();
    const first = await exchange(
      stream,
      report({ slow: 'decades' }, { allowed: 1, elapsedSeconds: 1e9 }, 'quota'),
    );
    const second = await exchange(
      stream,
      report({ slow: 'decades' }, { allowed: 1, elapsedSeconds: 1e9 }),
    );
    // A stream a moment old: its first report teaches no interval (three of Envoy's released 5 s
    // until one is known), and its second's time_elapsed counts as about a second.
    expect(first.ttlSeconds).toBeLessThanOrEqual(15);
    expect(second.ttlSeconds).toBeLessThanOrEqual(10);
    if (url()) {
      const [pool] = await redis.client.keys('*decades*:rlqs');
      expect(pool).toBeDefined();
      const ttl = await redis.client.pttl(pool!);
      expect(ttl).toBeGreaterThan(0);
      expect(ttl).toBeLessThanOrEqual(15_000);
    }
  });

  it('refuses 2^64 - 1 allowed requests, charging nothing and counting no over-admission', async () => {
    const stream = open();
    stream.stream.write(
      report({ tenant: 'flooded' }, { allowed: '18446744073709551615' }, 'quota'),
    );
    const status = await stream.ended;
    expect(status.code).toBe(grpc.status.INVALID_ARGUMENT);
    expect(status.details).toMatch(
      /bucket_quota_usages\[0\]\.num_requests_allowed .* is more than/,
    );
    // A report of what a rule could admit a hundred times over is refused too.
    const greedy = open();
    greedy.stream.write(report({ tenant: 'flooded' }, { allowed: 100 * 80 + 1 }, 'quota'));
    expect((await greedy.ended).details).toMatch(/100 times what its rule \(40 per 1 s\) admits/);

    const check = await tollgate.check({ domain: 'quota', descriptors: [d('tenant', 'flooded')] });
    expect(codes(check)).toEqual(['OK', 'OK']);
    expect(check.statuses?.[0]?.limit_remaining).toBe(39);
    const text = await (await fetch(`${tollgate.httpUrl}/metrics`)).text();
    expect(metricValue(text, 'tollgate_rlqs_over_admitted_total') ?? 0).toBe(0);
  });
});

describe('a report of 1,000 buckets on Redis, at the default REDIS_TIMEOUT', () => {
  it('is answered whole, a part at a time, while classic checks beside it are answered', async () => {
    await redis.client.flushall();
    const tollgate = await startTollgate({
      rules: RULES,
      redisUrl: redis.url,
      clock: realClock,
      env: { REDIS_TIMEOUT: '15ms' },
    });
    const stream = openRlqs(tollgate.address);
    try {
      const buckets = Array.from({ length: 1_000 }, (_, i) => ({ slow: `tenant-${i}` }));
      stream.stream.write({
        domain: 'quota',
        bucket_quota_usages: buckets.map((bucket) => ({
          bucket_id: { bucket },
          time_elapsed: { seconds: 1 },
          num_requests_allowed: '1',
          num_requests_denied: '0',
        })),
      });
      const classic = Promise.all(
        Array.from({ length: 20 }, (_, i) =>
          tollgate.check({ domain: 'quota', descriptors: [d('tenant', `beside-${i}`)] }),
        ),
      );
      const answer = (await stream.next()) as { bucket_action: unknown[] };
      expect(answer.bucket_action).toHaveLength(1_000);
      for (const response of await classic) expect(codes(response)).toEqual(['OK', 'OK']);
    } finally {
      stream.close();
      await tollgate.stop();
    }
  }, 60_000);
});

describe('a stream within every other bound that reports 1,000 buckets twenty times a second', () => {
  it('is ended RESOURCE_EXHAUSTED naming the bound, while classic checks beside it are answered', async () => {
    await redis.client.flushall();
    const tollgate = await startTollgate({ rules: RULES, redisUrl: redis.url, clock: realClock });
    const stream = openRlqs(tollgate.address);
    let ended: grpc.StatusObject | undefined;
    void stream.ended.then((status) => (ended = status));
    try {
      const buckets = Array.from({ length: 1_000 }, (_, i) => ({ busy: `tenant-${i}` }));
      const report = (first: boolean) => ({
        ...(first ? { domain: 'quota' } : {}),
        bucket_quota_usages: buckets.map((bucket) => ({
          bucket_id: { bucket },
          time_elapsed: { seconds: 0 },
          num_requests_allowed: '1',
          num_requests_denied: '0',
        })),
      });
      // 20 reports a second is within RLQS_MAX_REPORTS_PER_SECOND; 20,000 bucket usages a
      // second are not within RLQS_MAX_BUCKET_REPORTS_PER_SECOND (1,000, a burst of 5,000).
      const startedAt = Date.now();
      for (let i = 0; ended === undefined && Date.now() - startedAt < 10_000; i++) {
        stream.stream.write(report(i === 0));
        await new Promise((resolve) => setTimeout(resolve, 50));
      }
      expect(ended?.code).toBe(grpc.status.RESOURCE_EXHAUSTED);
      expect(ended?.details).toMatch(
        /more than 1000 bucket usages a second, RLQS_MAX_BUCKET_REPORTS_PER_SECOND/,
      );
      const classic = await tollgate.check({
        domain: 'quota',
        descriptors: [d('tenant', 'beside')],
      });
      expect(codes(classic)).toEqual(['OK', 'OK']);
    } finally {
      stream.close();
      await tollgate.stop();
    }
  }, 60_000);
});
