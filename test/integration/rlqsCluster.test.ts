// RLQS on Redis Cluster: a report's charges land on the counters classic checks read, and each
// rule's demand lives beside its counter, in the same slot (so one node answers both), where every
// instance splits the rule over the same streams.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { keySlot } from '../../src/store/slots.js';
import { startRedisCluster, type TestCluster } from '../support/redisCluster.js';
import {
  firstAssignment,
  openRlqs,
  usageReport,
  type RlqsTestStream,
} from '../support/rlqsClient.js';
import {
  codes,
  d,
  eventually,
  healthStatus,
  startTollgate,
  type Tollgate,
} from '../support/tollgate.js';

const RULES = `
domain: quota
descriptors:
  - key: tenant
    rate_limit: {unit: hour, requests_per_unit: 36000, algorithm: fixed_window}
`;

let cluster: TestCluster;
const instances: Tollgate[] = [];
beforeAll(async () => {
  cluster = await startRedisCluster();
  for (let i = 0; i < 2; i++) {
    const tollgate = await startTollgate({
      rules: RULES,
      env: { REDIS_TYPE: 'cluster', REDIS_URL: cluster.url, REDIS_TIMEOUT: '1s' },
    });
    await eventually(async () => (await healthStatus(tollgate.address)) === 'SERVING', 10_000);
    instances.push(tollgate);
  }
}, 90_000);
afterAll(async () => {
  for (const tollgate of instances) await tollgate.stop();
  await cluster?.stop();
});

/** Every key of the cluster's masters, with the port of the node that holds it. */
async function keysByNode(): Promise<Map<string, number>> {
  const found = new Map<string, number>();
  for (const node of await cluster.nodes()) {
    if (node.role !== 'master') continue;
    for (const key of await cluster.client(node.port).keys('*')) found.set(key, node.port);
  }
  return found;
}

const rateOf = (response: Record<string, unknown>) => firstAssignment(response).rate;

describe('RLQS on Redis Cluster', () => {
  it('charges the counter classic checks read, and keeps demand in its slot, shared by instances', async () => {
    const streams: RlqsTestStream[] = instances.map((tollgate) => openRlqs(tollgate.address));
    try {
      // One stream on each instance, on one bucket: 5 allowed and 5 denied a second each.
      for (const stream of streams) {
        stream.stream.write(usageReport({ tenant: 'acme' }, 5, 'quota', 5));
        await stream.next();
      }
      const rates: number[] = [];
      for (const stream of streams) {
        stream.stream.write(usageReport({ tenant: 'acme' }, 5, undefined, 5));
        rates.push(rateOf(await stream.next()));
      }
      // 10 a second of the rule, less the half second it keeps back, split evenly across instances.
      const half = (10 * (1 - 0.5 / 3600)) / 2;
      for (const rate of rates) expect(rate).toBeCloseTo(half, 0);

      // Four reports of 5 allowed, and what each stream's client will admit until its next
      // report (about a second at 5 a second) charged ahead: a classic check sees 20 to 30 taken,
      // and takes one more.
      const check = await instances[0]!.check({
        domain: 'quota',
        descriptors: [d('tenant', 'acme')],
      });
      expect(codes(check)).toEqual(['OK', 'OK']);
      const taken = 36_000 - 1 - (check.statuses?.[0]?.limit_remaining ?? 0);
      expect(taken).toBeGreaterThanOrEqual(20);
      expect(taken).toBeLessThanOrEqual(30);

      const keys = await keysByNode();
      const counter = [...keys.keys()].find(
        (key) => key.includes('acme') && !key.endsWith(':rlqs'),
      );
      const demand = [...keys.keys()].find((key) => key.includes('acme') && key.endsWith(':rlqs'));
      expect(counter).toBeDefined();
      expect(demand).toBe(`${counter}:rlqs`);
      expect(keySlot(demand!)).toBe(keySlot(counter!));
      expect(keys.get(demand!)).toBe(keys.get(counter!));
    } finally {
      for (const stream of streams) stream.close();
    }
  }, 60_000);
});
