import { status as grpcStatus, type ServiceError } from '@grpc/grpc-js';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { spawnTollgate, type TollgateProcess } from '../support/processes.js';
import { startRedis, type TestRedis } from '../support/redis.js';
import { callCheck, d } from '../support/tollgate.js';

// A service whose own event loop runs late must not fail calls that Redis answered in time. The
// tollgate process is frozen (SIGSTOP) for 300 ms, over and over, while callers keep calls in
// flight against a healthy Redis: every reply that arrived during a freeze is read after it,
// so no call may be UNAVAILABLE, although each freeze outlasts REDIS_TIMEOUT (100 ms) threefold.
// The timeout is not the default 15 ms: on a machine busy enough, Redis itself may take longer
// than that, and the call would rightly fail.

const RULES = `
domain: frozen
descriptors:
  - key: tenant
    rate_limit: {unit: hour, requests_per_unit: 4000000000}
    descriptors:
      - key: route
        rate_limit: {unit: hour, requests_per_unit: 4000000000}
  - key: remote_address
    rate_limit: {unit: hour, requests_per_unit: 4000000000}
`;

const CALLERS = 16;
const FREEZE_MS = 300;
const FREEZES = 20;

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

let redis: TestRedis;
let tollgate: TollgateProcess;

beforeAll(async () => {
  redis = await startRedis();
  // The default batching, as when the finding was seen; a timeout a busy Redis still keeps.
  tollgate = await spawnTollgate(RULES, { REDIS_URL: redis.url, REDIS_TIMEOUT: '100ms' });
}, 60_000);

afterAll(async () => {
  tollgate?.child.kill('SIGCONT');
  await tollgate?.stop();
  await redis?.stop();
});

describe('a service process frozen again and again under load', () => {
  it('never answers UNAVAILABLE for calls that a healthy Redis answered', async () => {
    const answers = new Map<string, number>();
    const count = (answer: string) => answers.set(answer, (answers.get(answer) ?? 0) + 1);
    let stopped = false;
    const callers = Array.from({ length: CALLERS }, async (_, caller) => {
      for (let i = 0; !stopped; i++) {
        try {
          const response = await callCheck(
            tollgate.client,
            {
              domain: 'frozen',
              descriptors: [
                d('tenant', `t${caller}`),
                d('tenant', `t${caller}`, 'route', `/r${i % 4}`),
                d('remote_address', `10.0.0.${caller}`),
              ],
            },
            // Far past any freeze: a call that is slow because of one is not a failure.
            10_000,
          );
          count(response.overall_code ?? 'none');
        } catch (error) {
          const { code, details } = error as ServiceError;
          count(`${grpcStatus[code]}: ${details}`);
        }
      }
    });

    await sleep(300);
    let frozen = 0;
    for (; frozen < FREEZES; frozen++) {
      tollgate.child.kill('SIGSTOP');
      await sleep(FREEZE_MS);
      tollgate.child.kill('SIGCONT');
      await sleep(100);
    }
    stopped = true;
    await Promise.all(callers);

    const summary = [...answers].map(([answer, n]) => `${n} × ${answer}`).join(', ');
    console.log(`[frozen] ${frozen} freezes of ${FREEZE_MS} ms: ${summary}`);
    const failed = [...answers].filter(([answer]) => answer !== 'OK');
    expect(failed, summary).toEqual([]);
    // The callers kept calls in flight throughout: each freeze caught some.
    expect(answers.get('OK') ?? 0).toBeGreaterThan(FREEZES * CALLERS);
    expect(tollgate.child.exitCode).toBeNull();
  }, 60_000);
});
