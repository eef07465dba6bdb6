// RLQS streams outlive a store that stops answering, for an assignment's TTL: Redis is frozen
// (SIGSTOP, as a hung or partitioned server is) under a stream that keeps reporting. A report
// whose store call times out is answered with what its bucket was last told; past the TTL the
// stream ends UNAVAILABLE, and health is NOT_SERVING, so that Envoy falls back.
import * as grpc from '@grpc/grpc-js';
import { setTimeout as sleep } from 'node:timers/promises';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startRedis, type TestRedis } from '../support/redis.js';
import { realClock } from '../support/rlqsFleet.js';
import { openRlqs, rlqsHealth, usageReport } from '../support/rlqsClient.js';
import { eventually, startTollgate, type Tollgate } from '../support/tollgate.js';

const RULES = `
domain: quota
descriptors:
  - key: tenant
    rate_limit: {unit: minute, requests_per_unit: 600, algorithm: fixed_window}
`;

let redis: TestRedis;
let tollgate: Tollgate;
beforeAll(async () => {
  redis = await startRedis();
  tollgate = await startTollgate({
    rules: RULES,
    redisUrl: redis.url,
    clock: realClock,
    env: { REDIS_TIMEOUT: '100ms' },
  });
});
afterAll(async () => {
  redis?.resume();
  await tollgate?.stop();
  await redis?.stop();
});

const strategyOf = (response: Record<string, unknown>) =>
  (
    response as {
      bucket_action: { quota_assignment_action?: { rate_limit_strategy?: object } }[];
    }
  ).bucket_action[0]?.quota_assignment_action?.rate_limit_strategy;

describe('an RLQS stream while Redis is frozen', () => {
  it('answers from the last assignment through a 1 s freeze, and carries on after it', async () => {
    const rlqs = openRlqs(tollgate.address);
    let ended: grpc.StatusObject | undefined;
    void rlqs.ended.then((status) => (ended = status));
    try {
      rlqs.stream.write(usageReport({ tenant: 'brief' }, 1, 'quota'));
      const before = strategyOf(await rlqs.next());
      expect(before).toHaveProperty('token_bucket');
      redis.pause();
      try {
        for (let i = 0; i < 3; i++) {
          rlqs.stream.write(usageReport({ tenant: 'brief' }, 1));
          expect(strategyOf(await rlqs.next())).toEqual(before);
          await sleep(300);
        }
      } finally {
        redis.resume();
      }
      rlqs.stream.write(usageReport({ tenant: 'brief' }, 1));
      expect(strategyOf(await rlqs.next())).toHaveProperty('token_bucket');
      expect(ended).toBeUndefined();
    } finally {
      rlqs.close();
    }
  });

  it('ends the stream UNAVAILABLE once Redis has been gone longer than the TTL, with health NOT_SERVING', async () => {
    const rlqs = openRlqs(tollgate.address);
    let ended: grpc.StatusObject | undefined;
    void rlqs.ended.then((status) => (ended = status));
    try {
      rlqs.stream.write(usageReport({ tenant: 'long' }, 1, 'quota'));
      const action = (
        (await rlqs.next()) as {
          bucket_action: {
            quota_assignment_action: { assignment_time_to_live: { seconds: string } };
          }[];
        }
      ).bucket_action[0]!.quota_assignment_action;
      const ttlMs = Number(action.assignment_time_to_live.seconds) * 1000;
      redis.pause();
      const frozenAt = Date.now();
      try {
        // A report every half second, as long as the stream lasts (at most 20 s).
        while (ended === undefined && Date.now() - frozenAt < 20_000) {
          rlqs.stream.write(usageReport({ tenant: 'long' }, 1));
          await sleep(500);
        }
        expect(ended?.code).toBe(grpc.status.UNAVAILABLE);
        expect(Date.now() - frozenAt).toBeGreaterThanOrEqual(ttlMs);
        await eventually(async () => (await rlqsHealth(tollgate.address)) === 'NOT_SERVING');
      } finally {
        redis.resume();
      }
      await eventually(async () => (await rlqsHealth(tollgate.address)) === 'SERVING', 15_000);
    } finally {
      rlqs.close();
    }
  }, 60_000);
});
