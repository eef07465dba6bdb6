// RLQS through a Sentinel failover: the streams stay open, every report is answered (from the
// last assignments while the master moves), and the charges go on landing on the new master.
import { setTimeout as sleep } from 'node:timers/promises';
import type * as grpc from '@grpc/grpc-js';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startRedisSentinel, type TestSentinel } from '../support/redisSentinel.js';
import { openRlqs, usageReport } from '../support/rlqsClient.js';
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

let sentinel: TestSentinel;
let tollgate: Tollgate;
beforeAll(async () => {
  sentinel = await startRedisSentinel();
  tollgate = await startTollgate({
    rules: RULES,
    env: {
      REDIS_TYPE: 'sentinel',
      REDIS_URL: sentinel.url,
      REDIS_TIMEOUT: '250ms',
      // Longer than a failover takes here, so that the streams outlive it.
      RLQS_ASSIGNMENT_TTL_FLOOR: '15s',
    },
  });
  await eventually(async () => (await healthStatus(tollgate.address)) === 'SERVING', 10_000);
}, 60_000);
afterAll(async () => {
  await tollgate?.stop();
  await sentinel?.stop();
});

describe('RLQS through SENTINEL FAILOVER', () => {
  it('keeps its streams, answers every report, and charges the new master', async () => {
    const streams = [openRlqs(tollgate.address), openRlqs(tollgate.address)];
    const ended: (grpc.StatusObject | undefined)[] = streams.map(() => undefined);
    streams.forEach((stream, i) => void stream.ended.then((status) => (ended[i] = status)));
    try {
      for (const stream of streams) {
        stream.stream.write(usageReport({ tenant: 'moved' }, 1, 'quota'));
        expect((await stream.next()).bucket_action).toHaveLength(1);
      }
      const peek = async () => {
        const response = await tollgate.check({
          domain: 'quota',
          descriptors: [{ ...d('tenant', 'moved'), hits_addend: { value: '0' } }],
        });
        expect(codes(response)).toEqual(['OK', 'OK']);
        return response.statuses?.[0]?.limit_remaining ?? 0;
      };
      const round = async (allowed = 1) => {
        for (const stream of streams) {
          stream.stream.write(usageReport({ tenant: 'moved' }, allowed));
          expect((await stream.next()).bucket_action).toHaveLength(1);
        }
      };
      // A report from each stream every 300 ms while the master moves.
      let moving = true;
      const failover = sentinel.failover().finally(() => (moving = false));
      while (moving) {
        await round();
        await sleep(300);
      }
      const moved = await failover;
      expect(moved.to).not.toBe(moved.from);
      expect(ended).toEqual([undefined, undefined]);

      // Once the new master answers, each report is charged there again: 20 allowed each, past
      // the few each stream's client was charged ahead for.
      await eventually(async () => (await peek()) > 0, 15_000);
      const before = await peek();
      for (let i = 0; i < 4; i++) await round(20);
      const taken = before - (await peek());
      expect(taken).toBeGreaterThanOrEqual(2 * 4 * 15);
      expect(taken).toBeLessThanOrEqual(2 * 4 * 20 + 2 * 10);
      expect(ended).toEqual([undefined, undefined]);
      const keys = await sentinel.client(moved.to).keys('*moved*');
      expect(keys.some((key) => key.endsWith(':rlqs'))).toBe(true);
    } finally {
      for (const stream of streams) stream.close();
    }
  }, 60_000);
});
