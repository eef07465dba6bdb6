import { status as grpcStatus, type ServiceError } from '@grpc/grpc-js';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { spawnTollgate, type TollgateProcess } from '../support/processes.js';
import { startRedis, type TestRedis } from '../support/redis.js';
import { callCheck, d, eventually } from '../support/tollgate.js';

// A Redis that stops answering but keeps its connections open (a hung or partitioned server;
// SIGSTOP here) must not make tollgate hold every call it sends: each is answered at
// REDIS_TIMEOUT, and once the connection has been silent for a second with calls waiting,
// tollgate drops it and connects again, which releases them. It recovers by itself once Redis
// answers again.

const RULES = `
domain: silent
descriptors:
  - key: tenant
    rate_limit: {unit: hour, requests_per_unit: 4000000000}
`;
const TIMEOUT_MS = 100;
const BOUND_MS = TIMEOUT_MS + 900;

let redis: TestRedis;
let tollgate: TollgateProcess;

beforeAll(async () => {
  redis = await startRedis();
  tollgate = await spawnTollgate(
    RULES,
    { REDIS_URL: redis.url, REDIS_TIMEOUT: `${TIMEOUT_MS}ms`, LOG_LEVEL: 'warn' },
    { captureStdout: true },
  );
}, 60_000);

afterAll(async () => {
  redis?.resume();
  await tollgate?.stop();
  await redis?.stop();
});

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

describe('a Redis that stops answering, its connections open', () => {
  it('is answered at the timeout, its connection replaced while silent, and found again', async () => {
    let stopped = false;
    const answers = new Map<string, number>();
    let slowest = 0;
    const callers = Array.from({ length: 8 }, async (_, caller) => {
      while (!stopped) {
        const started = performance.now();
        let answer: string;
        try {
          const response = await callCheck(tollgate.client, {
            domain: 'silent',
            descriptors: [d('tenant', `t${caller}`)],
          });
          answer = response.overall_code ?? 'none';
        } catch (error) {
          answer = grpcStatus[(error as ServiceError).code];
        }
        slowest = Math.max(slowest, performance.now() - started);
        answers.set(answer, (answers.get(answer) ?? 0) + 1);
        await sleep(5);
      }
    });

    await sleep(300);
    redis.pause();
    await sleep(4_000);
    const during = new Map(answers);
    redis.resume();
    await eventually(async () => {
      const response = await callCheck(tollgate.client, {
        domain: 'silent',
        descriptors: [d('tenant', 'after')],
      });
      return response.overall_code === 'OK';
    }, 5_000);
    stopped = true;
    await Promise.all(callers);

    const reconnects = tollgate
      .stdout()
      .split('\n')
      .filter((line) => line.includes('redis answered nothing while calls waited'))
      .map((line) => JSON.parse(line) as { silentMs: number; waiting: number });
    console.log(
      `[silent] Redis stopped 4 s: ${JSON.stringify(Object.fromEntries(during))}; ` +
        `slowest call ${slowest.toFixed(0)} ms; ${reconnects.length} reconnects, ` +
        `waiting ${reconnects.map((r) => r.waiting).join(', ')}`,
    );
    expect(during.get('UNAVAILABLE') ?? 0).toBeGreaterThan(0);
    expect(slowest).toBeLessThan(BOUND_MS);
    // Silent for a second: the connection is replaced, releasing what that second sent. Until
    // Redis answers again, the next connection is not ready, and calls fail at once.
    expect(reconnects.length).toBeGreaterThanOrEqual(1);
    for (const reconnect of reconnects) {
      expect(reconnect.silentMs).toBe(1_000);
      expect(reconnect.waiting).toBeLessThan(1_000);
    }
    expect(tollgate.child.exitCode).toBeNull();
  }, 30_000);
});
