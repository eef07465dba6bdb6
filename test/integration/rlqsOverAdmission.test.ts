// Over-admission counted across instances: two tollgates on one Redis, each with an RLQS client
// of one rule, each counting the part past the limit of the charges it made, as Redis answered
// them. Their sum is the rule's, though neither instance saw the other's reports.
import { afterAll, beforeAll, expect, it } from 'vitest';
import { metricValue } from '../support/metrics.js';
import { startRedis, type TestRedis } from '../support/redis.js';
import { openRlqs, usageReport, type RlqsTestStream } from '../support/rlqsClient.js';
import { startTollgate, type Tollgate } from '../support/tollgate.js';

// A sliding window is charged as reported (nothing ahead), so each report's charge is its
// allowed requests; an hour's window keeps them all in its first window.
const RULES = `
domain: quota
descriptors:
  - key: tenant
    rate_limit: {unit: hour, requests_per_unit: 100, algorithm: sliding_window}
`;

let redis: TestRedis;
const instances: Tollgate[] = [];
const streams: RlqsTestStream[] = [];

beforeAll(async () => {
  redis = await startRedis();
  for (let i = 0; i < 2; i++) {
    instances.push(await startTollgate({ rules: RULES, redisUrl: redis.url }));
  }
  for (const instance of instances) streams.push(openRlqs(instance.address));
}, 60_000);

afterAll(async () => {
  for (const stream of streams) stream.close();
  await Promise.all(instances.map((instance) => instance.stop()));
  await redis?.stop();
});

const overAdmitted = async (instance: Tollgate) =>
  metricValue(
    await (await fetch(`${instance.httpUrl}/metrics`)).text(),
    'tollgate_rlqs_over_admitted_total',
  );

it('is what each instance charged past the limit, summing to what the rule was passed by', async () => {
  const [a, b] = streams as [RlqsTestStream, RlqsTestStream];
  const tenant = { tenant: 'initech' };
  a.stream.write(usageReport(tenant, 70, 'quota'));
  await a.next();
  b.stream.write(usageReport(tenant, 50, 'quota'));
  await b.next();
  a.stream.write(usageReport(tenant, 10));
  await a.next();
  // 130 of 100: b's charge passed the limit by 20, a's second by all of its 10.
  expect(await overAdmitted(instances[0]!)).toBe(10);
  expect(await overAdmitted(instances[1]!)).toBe(20);
});
