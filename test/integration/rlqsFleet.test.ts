// The fleet simulator (test/rlqs/sim) against `tollgate serve`'s RLQS, in real time: simulated
// Envoys enforce their assignments with local token buckets at their own request rates, and the
// admitted requests per epoch-aligned window are held to the rule's limit. Windows are 10 s here,
// over 3 windows after 2 of warm-up, so that the scenarios stay short.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {
  FLEET_RULES,
  L,
  MEASURED,
  fleetScenario,
  jain,
  measuredWindows,
  realClock,
  equalClients,
  skewedClients,
} from '../support/rlqsFleet.js';
import { buildRlqsSim, runSimulation, type SimResult } from '../support/rlqsSim.js';
import { startTollgate, type Tollgate } from '../support/tollgate.js';

let tollgate: Tollgate;
beforeAll(async () => {
  buildRlqsSim();
  tollgate = await startTollgate({ rules: FLEET_RULES, clock: realClock });
}, 300_000);
afterAll(async () => {
  await tollgate?.stop();
});

const admittedPerWindow = (result: SimResult) =>
  measuredWindows(result).map((w) => w.total.admitted);

const equal = equalClients;
const skewed = skewedClients;

describe('an RLQS fleet on one bucket', () => {
  const cases = [
    ['1 client', 'solo', equal(1)],
    ['4 equal clients', 'equal4', equal(4)],
    ['16 equal clients', 'equal16', equal(16)],
    ['4 skewed clients', 'skewed4', skewed(4)],
    ['16 skewed clients', 'skewed16', skewed(16)],
  ] as const;
  const results = new Map<string, SimResult>();
  beforeAll(async () => {
    // At once, on tenants of their own: each has its own counter and demand.
    const runs = await Promise.all(
      cases.map(([, tenant, clients]) =>
        runSimulation(fleetScenario(tollgate.address, tenant, [...clients])),
      ),
    );
    cases.forEach(([, tenant], at) => results.set(tenant, runs[at]!));
  }, 180_000);

  it.each(cases)('%s: admits 0.9-1.05 L a window, in fair shares', (name, tenant) => {
    const result = results.get(tenant)!;
    const admitted = admittedPerWindow(result);
    console.log(
      `[rlqs fleet] ${name}: ${admitted.map((n) => (n / L).toFixed(3)).join(' ')} L a window`,
    );
    expect(admitted).toHaveLength(MEASURED);
    for (const n of admitted) expect(n).toBeLessThanOrEqual(L * 1.05);
    // The demand is three times R: the limit is used, not starved (a window rule keeps half a
    // second of its rate back for new buckets' starts).
    for (const n of admitted) expect(n).toBeGreaterThanOrEqual(L * 0.9);
    expect(jain(result)).toBeGreaterThanOrEqual(0.95);
    expect(result.streamErrors).toEqual([]);
  });
});
