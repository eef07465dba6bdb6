// RLQS across a restart of tollgate, on a real redis-server that keeps the counters and the
// demand: the simulated Envoys lose their streams, keep their last assignments (the sample
// config's expired-assignment behaviour), open their streams again, and the bound holds.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { FLEET_RULES, L, fleetScenario, realClock } from '../support/rlqsFleet.js';
import { buildRlqsSim, runSimulation, type SimResult } from '../support/rlqsSim.js';
import { freePort } from '../support/ports.js';
import { startRedis, type TestRedis } from '../support/redis.js';
import { startTollgate, type Tollgate } from '../support/tollgate.js';

const DURATION_MS = 40_000;
const STOP_AT_MS = 18_000;
const DOWN_MS = 1_500;

let redis: TestRedis;
let result: SimResult;
let second: Tollgate | undefined;

beforeAll(async () => {
  buildRlqsSim();
  redis = await startRedis();
  const port = await freePort();
  const start = () =>
    startTollgate({
      rules: FLEET_RULES,
      clock: realClock,
      redisUrl: redis.url,
      env: { GRPC_PORT: String(port) },
    });
  const first = await start();
  const run = runSimulation(
    fleetScenario(
      `127.0.0.1:${port}`,
      'restart',
      [{ name: 'envoy', count: 4, rps: 150, jitter: 0.2, buckets: [] }],
      { durationMs: DURATION_MS },
    ),
  );
  await new Promise((resolve) => setTimeout(resolve, STOP_AT_MS));
  await first.stop();
  await new Promise((resolve) => setTimeout(resolve, DOWN_MS));
  second = await start();
  result = await run;
}, 180_000);

afterAll(async () => {
  await second?.stop();
  await redis?.stop();
});

describe('RLQS across a restart of tollgate', () => {
  it('holds every whole window to L + 5%, the restart included', () => {
    const whole = result.windows.filter((w) => !w.partial);
    expect(whole.length).toBeGreaterThanOrEqual(3);
    for (const window of whole) expect(window.total.admitted).toBeLessThanOrEqual(L * 1.05);
  });

  it('has every client open its stream again and get assignments from the new instance', () => {
    for (let n = 0; n < 4; n++) {
      const client = `envoy#${n}`;
      expect(result.reconnects?.[client]).toBeGreaterThanOrEqual(1);
      const last = Math.max(
        ...result.assignments.filter((a) => a.client === client).map((a) => a.atMs),
      );
      expect(last - result.startMs).toBeGreaterThan(DURATION_MS - 2_000);
    }
  });
});
