// The RLQS fleet as Envoy's filter is released (v1.40): a report every 5 s whatever its
// reporting_interval, time_elapsed and every duration it reads in whole seconds, the domain in
// every message (the simulator's "envoy-code" semantics). The other fleet tests play the API's
// shape, with 500 ms reports. Each scenario runs at once with the others, on a tenant of its own,
// for 60 s: 2 windows of warm-up and 3 measured.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {
  FLEET_RULES,
  L,
  MEASURED,
  fleetScenario,
  jain,
  measuredWindows,
  realClock,
  classicLoad,
  equalClients,
  skewedClients,
} from '../support/rlqsFleet.js';
import { buildRlqsSim, runSimulation, type SimResult } from '../support/rlqsSim.js';
import { startTollgate, type Tollgate } from '../support/tollgate.js';

/** Envoy v1.40's timer. */
const RELEASED_INTERVAL = 5_000;

const equal = equalClients;
const skewed = skewedClients;

let tollgate: Tollgate;
const results = new Map<string, SimResult>();
const cases = [
  ['1 client', 'released-solo', equal(1)],
  ['4 equal clients', 'released-equal4', equal(4)],
  ['4 skewed clients', 'released-skewed4', skewed(4)],
  ['4 equal clients and classic checks', 'released-shared', equal(4)],
] as const;
/** Classic checks allowed per window, on the tenant the shared case's clients report on. */
let classicAllowed = new Map<number, number>();

beforeAll(async () => {
  buildRlqsSim();
  tollgate = await startTollgate({ rules: FLEET_RULES, clock: realClock });
  const scenarios = cases.map(([, tenant, clients]) =>
    fleetScenario(tollgate.address, tenant, [...clients], {
      semantics: 'envoy-code',
      reportingIntervalMs: RELEASED_INTERVAL,
    }),
  );
  const [runs] = await Promise.all([
    Promise.all(scenarios.map((scenario) => runSimulation(scenario))),
    // 60 a second, 0.3 L, on the shared case's tenant, for as long as its fleet runs.
    classicLoad(tollgate, 'released-shared', 60, Date.now() + scenarios[3]!.durationMs).then(
      (allowed) => (classicAllowed = allowed),
    ),
  ]);
  cases.forEach(([, tenant], at) => results.set(tenant, runs[at]!));
}, 300_000);
afterAll(async () => {
  await tollgate?.stop();
});

describe('an RLQS fleet of Envoys as released, reporting every 5 s in whole seconds', () => {
  it.each(cases)(
    '%s: admits 0.9-1.05 L a window, in fair shares, on settled assignments',
    (name, tenant) => {
      const result = results.get(tenant)!;
      // The clients' admissions, and the classic checks allowed beside them in the shared case.
      const shared = tenant === 'released-shared';
      const admitted = measuredWindows(result).map(
        (w) => w.total.admitted + (shared ? (classicAllowed.get(w.startMs) ?? 0) : 0),
      );
      // Assignments that changed after warm-up: each is a new, full token bucket at the client.
      const warmEnd = measuredWindows(result)[0]?.startMs ?? Infinity;
      const late = result.assignments.filter((a) => a.atMs >= warmEnd);
      const changed = late.filter((a) => a.changed).length;
      console.log(
        `[rlqs released] ${name}: ${admitted.map((n) => (n / L).toFixed(3)).join(' ')} L a window; ` +
          `${changed} of ${late.length} assignments after warm-up changed`,
      );
      expect(admitted).toHaveLength(MEASURED);
      for (const n of admitted) expect(n).toBeLessThanOrEqual(L * 1.05);
      // The demand is three times R: the limit is used, not starved, though each report's charge
      // lands up to half a window late (a client alone admitted 0.57-0.66 L before the session
      // counted what its reports carried over a boundary, and 4 clients reporting together 0.83 L
      // in windows whose boundary came just before their reports, before the streams' parts were
      // counted together).
      // Beside classic checks, a window that their checks and the clients' reserves fill leaves
      // each client what it holds of it, as a lower rate: denied instead, on a busy machine
      // (reports late, reserves larger, the window filled at its middle report), the clients
      // admitted 0.83-0.87 L.
      for (const n of admitted) expect(n).toBeGreaterThanOrEqual(L * 0.9);
      // Settled: each client's assignment changes at most once more after warm-up (a share that
      // moved a little, taken after three reports), never back and forth. Beside classic checks
      // a window may be spent before its end, and the clients denied until the next.
      const clients = new Set(late.map((a) => a.client)).size;
      if (!shared) expect(changed).toBeLessThanOrEqual(clients);
      expect(jain(result)).toBeGreaterThanOrEqual(0.95);
      expect(result.streamErrors).toEqual([]);
    },
  );

  it.each(cases)(
    '%s: no assignment expires before the next report of its stream',
    (_name, tenant) => {
      const result = results.get(tenant)!;
      expect(result.assignmentsUnlisted).toBe(0);
      const byClient = new Map<string, SimResult['assignments']>();
      for (const a of result.assignments)
        byClient.set(a.client, [...(byClient.get(a.client) ?? []), a]);
      expect(byClient.size).toBeGreaterThan(0);
      for (const [client, assignments] of byClient) {
        for (let i = 1; i < assignments.length; i++) {
          const [before, next] = [assignments[i - 1]!, assignments[i]!];
          const gap = next.atMs - before.atMs;
          expect(gap, `${client}: ${before.ttlMs} ms of TTL at ${before.atMs}`).toBeLessThanOrEqual(
            before.ttlMs ?? Infinity,
          );
        }
      }
    },
  );
});
