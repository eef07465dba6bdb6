// The fleet simulator against `tollgate serve`'s RLQS, in real time, beyond one steady bucket:
// clients that join and leave, classic checks on the same tenant, and connections ended by their
// maximum age. Each scenario runs at once with the others, on a tenant (or a service) of its own.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {
  FLEET_RULES,
  INTERVAL,
  L,
  MEASURED,
  W,
  classicLoad,
  fleetScenario,
  measuredWindows,
  realClock,
} from '../support/rlqsFleet.js';
import {
  buildRlqsSim,
  runSimulation,
  type SimAssignment,
  type SimResult,
} from '../support/rlqsSim.js';
import { startTollgate, type Tollgate } from '../support/tollgate.js';

/** R less the second a window rule keeps back: what the RLQS clients of a tenant share. */
const R_RLQS = (L / (W / 1000)) * (1 - 500 / W);

const rateOf = (a: SimAssignment) =>
  a.kind === 'token_bucket' ? (a.tokensPerFill ?? 0) / ((a.fillIntervalMs ?? 1000) / 1000) : NaN;

/** The rate of the assignment `client` enforced at `atMs` after the run's start. */
function rateAt(result: SimResult, client: string, atMs: number): number {
  const held = result.assignments.filter(
    (a) => a.client === client && a.atMs - result.startMs <= atMs,
  );
  return held.length === 0 ? NaN : rateOf(held[held.length - 1]!);
}

/** A client's assignments, as "ms after the start: rate", to tell a failure's story. */
function timeline(result: SimResult, client: string): string {
  const rates = result.assignments
    .filter((a) => a.client === client)
    .map((a) => `${a.atMs - result.startMs}: ${rateOf(a).toFixed(1)}`);
  return `${client}'s assignments: ${rates.join(', ')}`;
}

let tollgate: Tollgate;
let aged: Tollgate;
const results = new Map<string, SimResult>();
/** Classic checks allowed, per epoch-aligned window, in the shared-counter scenario. */
let classicAllowed = new Map<number, number>();

const JOIN_MS = 12_000;
const LEAVE_MS = 20_000;

beforeAll(async () => {
  buildRlqsSim();
  tollgate = await startTollgate({ rules: FLEET_RULES, clock: realClock });
  // Connections asked to close (GOAWAY) after 3 s or so, with 1 s of grace.
  aged = await startTollgate({
    rules: FLEET_RULES,
    clock: realClock,
    env: { GRPC_MAX_CONNECTION_AGE: '3s', GRPC_MAX_CONNECTION_AGE_GRACE: '1s' },
  });
  const churn = fleetScenario(
    tollgate.address,
    'churn',
    [
      { name: 'stays', count: 3, rps: 150, jitter: 0.2, buckets: [] },
      { name: 'leaves', rps: 150, jitter: 0.2, stopMs: LEAVE_MS, buckets: [] },
      { name: 'joins', rps: 150, jitter: 0.2, startMs: JOIN_MS, buckets: [] },
    ],
    { durationMs: 32_000 },
  );
  const shared = fleetScenario(tollgate.address, 'shared', [
    { name: 'envoy', count: 4, rps: 150, jitter: 0.2, buckets: [] },
  ]);
  const goaway = fleetScenario(
    aged.address,
    'aged',
    [{ name: 'envoy', count: 2, rps: 150, jitter: 0.2, buckets: [] }],
    { durationMs: 16_000 },
  );
  const [churned, sharedResult, goawayResult] = await Promise.all([
    runSimulation(churn),
    runSimulation(shared),
    runSimulation(goaway),
    classicLoad(tollgate, 'shared', 60, Date.now() + shared.durationMs).then(
      (allowed) => (classicAllowed = allowed),
    ),
  ]);
  results.set('churn', churned);
  results.set('shared', sharedResult);
  results.set('goaway', goawayResult);
}, 180_000);

afterAll(async () => {
  await tollgate?.stop();
  await aged?.stop();
});

describe('RLQS clients that join and leave', () => {
  // Demand is learnt from a report, and the others hear of it at their next: two intervals, and
  // a little for the reports' own latency.
  const SETTLED = 2 * INTERVAL + 450;

  it('shares the rule among the new set of clients within 2 reporting intervals', () => {
    const result = results.get('churn')!;
    const before = R_RLQS / 4;
    const joined = R_RLQS / 5;
    for (const client of ['stays#0', 'stays#1', 'stays#2', 'leaves']) {
      expect(rateAt(result, client, JOIN_MS - 500)).toBeCloseTo(before, -1);
    }
    for (const client of ['stays#0', 'stays#1', 'stays#2', 'leaves', 'joins']) {
      const rate = rateAt(result, client, JOIN_MS + SETTLED);
      expect(Math.abs(rate - joined) / joined, timeline(result, client)).toBeLessThanOrEqual(0.15);
    }
    for (const client of ['stays#0', 'stays#1', 'stays#2', 'joins']) {
      const rate = rateAt(result, client, LEAVE_MS + SETTLED);
      expect(Math.abs(rate - before) / before, timeline(result, client)).toBeLessThanOrEqual(0.15);
    }
  });

  it('admits at most L + 5% in every whole window, joins and leaves included', () => {
    const result = results.get('churn')!;
    const whole = result.windows.filter((w) => !w.partial);
    expect(whole.length).toBeGreaterThanOrEqual(2);
    for (const window of whole) expect(window.total.admitted).toBeLessThanOrEqual(L * 1.05);
  });
});

describe('RLQS clients and classic checks on one tenant', () => {
  it('stay within L + 5% a window together, and both are served', () => {
    const result = results.get('shared')!;
    const windows = measuredWindows(result);
    expect(windows).toHaveLength(MEASURED);
    for (const window of windows) {
      const classic = classicAllowed.get(window.startMs) ?? 0;
      console.log(
        `[rlqs shared] rlqs ${window.total.admitted} classic ${classic} ${JSON.stringify(window.admitted)}`,
      );
      expect(classic).toBeGreaterThan(0);
      expect(window.total.admitted).toBeGreaterThan(L * 0.5);
      expect(window.total.admitted + classic).toBeLessThanOrEqual(L * 1.05);
    }
  });
});

describe('RLQS streams on connections ended by their maximum age', () => {
  it('are opened again, and the assignments resume', () => {
    const result = results.get('goaway')!;
    expect(result.reconnectsTotal).toBeGreaterThanOrEqual(2);
    for (const client of ['envoy#0', 'envoy#1']) {
      const times = result.assignments
        .filter((a) => a.client === client)
        .map((a) => a.atMs - result.startMs);
      // Assignments keep coming until the end, across every reconnection.
      expect(Math.max(...times)).toBeGreaterThan(16_000 - 2 * INTERVAL - 500);
      expect(result.reconnects?.[client]).toBeGreaterThanOrEqual(1);
    }
    for (const window of result.windows.filter((w) => !w.partial)) {
      expect(window.total.admitted).toBeLessThanOrEqual(L * 1.05);
    }
  });
});
