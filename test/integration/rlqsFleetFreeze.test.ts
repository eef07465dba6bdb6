// A fleet of simulated Envoys (test/rlqs/sim) on RLQS while Redis freezes under it: SIGSTOP, as a
// hung or partitioned server is, for 100 ms, 1 s and 10 s, in one run. Reports whose store calls
// fail are answered with what each bucket was last told, so the clients keep their pace; streams
// end only once the store has failed them for longer than an assignment's TTL (the 10 s freeze),
// and the clients open them again. Two fleets run at once on tenants of their own: Envoy as
// released (a report every 5 s, whole seconds) and exact 500 ms reports.
import { setTimeout as sleep } from 'node:timers/promises';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startRedis, type TestRedis } from '../support/redis.js';
import { FLEET_RULES, L, W, equalClients, fleetScenario, realClock } from '../support/rlqsFleet.js';
import { buildRlqsSim, runSimulation, type SimResult } from '../support/rlqsSim.js';
import { startTollgate, type Tollgate } from '../support/tollgate.js';

/**
 * When each freeze begins, after the fleets start, and how long it lasts; the run goes on for
 * at least two whole windows after the last freeze's.
 */
const FREEZES = [
  { afterMs: 22_000, forMs: 100 },
  { afterMs: 26_000, forMs: 1_000 },
  { afterMs: 40_000, forMs: 10_000 },
];
const DURATION_MS = 90_000;
/** Whole windows before this are the join and its warm-up. */
const WARM_MS = 2 * W;

let redis: TestRedis;
let tollgate: Tollgate;
/** Each freeze as it happened, in epoch ms. */
const frozen: { from: number; to: number; forMs: number }[] = [];
const results = new Map<string, SimResult>();
let startedAt = 0;

const fleets = [
  ['as released', 'freeze-released', { semantics: 'envoy-code', reportingIntervalMs: 5_000 }],
  ['exact 500 ms', 'freeze-exact', { semantics: 'proto', reportingIntervalMs: 500 }],
] as const;

beforeAll(async () => {
  buildRlqsSim();
  redis = await startRedis();
  tollgate = await startTollgate({
    rules: FLEET_RULES,
    redisUrl: redis.url,
    clock: realClock,
    env: { REDIS_TIMEOUT: '100ms' },
  });
  startedAt = Date.now();
  const runs = fleets.map(([, tenant, shape]) =>
    runSimulation(
      fleetScenario(tollgate.address, tenant, [...equalClients(4)], {
        ...shape,
        durationMs: DURATION_MS,
      }),
    ),
  );
  for (const { afterMs, forMs } of FREEZES) {
    await sleep(Math.max(0, startedAt + afterMs - Date.now()));
    redis.pause();
    const from = Date.now();
    try {
      await sleep(forMs);
    } finally {
      redis.resume();
    }
    frozen.push({ from, to: Date.now(), forMs });
  }
  const done = await Promise.all(runs);
  fleets.forEach(([, tenant], at) => results.set(tenant, done[at]!));
}, 180_000);

afterAll(async () => {
  redis?.resume();
  await tollgate?.stop();
  await redis?.stop();
});

/** The window holds a freeze, or the window after it, in which its charges land. */
const nearFreeze = (startMs: number) =>
  frozen.some(({ from, to }) => startMs < to + W && startMs + W > from);

describe.each(fleets)('an RLQS fleet %s while Redis freezes', (name, tenant) => {
  it('admits at most L + 5% in every window, and 0.9 L in those away from a freeze', () => {
    const result = results.get(tenant)!;
    const measured = result.windows.filter((w) => !w.partial && w.startMs >= startedAt + WARM_MS);
    const ended = result.streamErrors.map((e) => (e.atMs - startedAt) / 1000);
    console.log(
      `[rlqs freeze] ${name}: ` +
        measured
          .map((w) => `${(w.total.admitted / L).toFixed(3)}${nearFreeze(w.startMs) ? '*' : ''}`)
          .join(' ') +
        ' L a window (* near a freeze); ' +
        (ended.length === 0
          ? 'no stream ended'
          : `${ended.length} streams ended UNAVAILABLE, ${Math.min(...ended).toFixed(1)}-` +
            `${Math.max(...ended).toFixed(1)} s in (freezes at ${frozen
              .map((f) => `${((f.from - startedAt) / 1000).toFixed(1)} s`)
              .join(', ')})`),
    );
    expect(measured.length).toBeGreaterThanOrEqual(5);
    for (const window of measured) expect(window.total.admitted).toBeLessThanOrEqual(L * 1.05);
    const away = measured.filter((w) => !nearFreeze(w.startMs));
    expect(away.length).toBeGreaterThanOrEqual(1);
    for (const window of away) expect(window.total.admitted).toBeGreaterThanOrEqual(L * 0.9);
  });

  it('ends no stream through the 100 ms and 1 s freezes, and only UNAVAILABLE through 10 s', () => {
    const result = results.get(tenant)!;
    const long = frozen.find((f) => f.forMs === 10_000)!;
    expect(frozen).toHaveLength(3);
    for (const error of result.streamErrors) {
      // The stream ends once the store has failed it for longer than an assignment's TTL.
      expect(error.code).toBe('UNAVAILABLE');
      expect(error.atMs).toBeGreaterThanOrEqual(long.from);
      expect(error.atMs).toBeLessThanOrEqual(long.to + 5_000);
    }
    // Assignments come again after the last freeze.
    const last = Math.max(...result.assignments.map((a) => a.atMs));
    expect(last).toBeGreaterThan(long.to + 5_000);
  });
});
