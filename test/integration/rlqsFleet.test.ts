// The fleet simulator (test/rlqs/sim) against `tollgate serve`'s RLQS, in real time: simulated
// Envoys enforce their assignments with local token buckets at their own request rates, and the
// admitted requests per epoch-aligned window are held to the rule's limit. Windows are 2 s here so
// that the scenarios stay short; bench/ runs the long ones.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {
  buildRlqsSim,
  runSimulation,
  type SimClient,
  type SimResult,
  type SimScenario,
} from '../support/rlqsSim.js';
import { startTollgate, type ManualClock, type Tollgate } from '../support/tollgate.js';

const W = 10_000;
/** L per W: R = 200 a second. */
const L = 2_000;
const INTERVAL = 500;
const WARM = 2;
const MEASURED = 3;
const RULES = `
domain: fleet
descriptors:
  - key: tenant
    rate_limit: {requests_per_unit: ${L}, window: 10s, algorithm: fixed_window}
`;
/** The service's clock is the real one: the simulated Envoys run in real time. */
const realClock: ManualClock = {
  get now() {
    return Date.now();
  },
  advance() {
    throw new Error('the fleet runs in real time');
  },
};

let tollgate: Tollgate;
beforeAll(async () => {
  buildRlqsSim();
  tollgate = await startTollgate({ rules: RULES, clock: realClock });
}, 300_000);
afterAll(async () => {
  await tollgate?.stop();
});

function scenario(tenant: string, clients: SimClient[], extra: Partial<SimScenario> = {}) {
  return {
    addr: tollgate.address,
    domain: 'fleet',
    // Starts a little into a window, so that the first full window is warm-up.
    durationMs: (WARM + MEASURED + 1) * W,
    windowMs: W,
    reportingIntervalMs: INTERVAL,
    // The sample config's fallbacks (envoy/envoy-rlqs.yaml), scaled to these rates.
    noAssignment: { tokenBucket: { maxTokens: 5, tokensPerFill: 5, fillIntervalMs: 1000 } },
    expiredAssignment: { reuseLast: true as const, timeoutMs: 300_000 },
    listUnchanged: true,
    assignmentLimit: 5_000,
    seed: 7,
    ...extra,
    clients: clients.map((client) => ({ ...client, buckets: [{ tenant }] })),
  } satisfies SimScenario;
}

/** The windows after warm-up that the run covered whole. */
function measured(result: SimResult) {
  return result.windows.filter((w) => !w.partial).slice(WARM, WARM + MEASURED);
}

/** Jain's fairness index of admitted over demand (admitted plus denied), per client. */
function jain(result: SimResult): number {
  const admitted: Record<string, number> = {};
  const demand: Record<string, number> = {};
  for (const window of measured(result)) {
    for (const [client, n] of Object.entries(window.admitted ?? {})) {
      admitted[client] = (admitted[client] ?? 0) + n;
      demand[client] = (demand[client] ?? 0) + n + (window.denied?.[client] ?? 0);
    }
  }
  const x = Object.keys(demand).map((client) => admitted[client]! / demand[client]!);
  const sum = x.reduce((a, b) => a + b, 0);
  return (sum * sum) / (x.length * x.reduce((a, b) => a + b * b, 0));
}

const admittedPerWindow = (result: SimResult) => measured(result).map((w) => w.total.admitted);

const equal = (n: number): SimClient[] => [
  { name: 'envoy', count: n, rps: 600 / n, jitter: 0.2, buckets: [] },
];
const skewed = (n: number): SimClient[] =>
  Array.from({ length: n }, (_, i) => ({
    name: `envoy${i}`,
    rps: (1200 / (n * (n + 1))) * (i + 1),
    jitter: 0.2,
    buckets: [],
  }));

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
      cases.map(([, tenant, clients]) => runSimulation(scenario(tenant, [...clients]))),
    );
    cases.forEach(([, tenant], at) => results.set(tenant, runs[at]!));
  }, 180_000);

  it.each(cases)('%s: admits at most L + 5% a window, in fair shares', (_name, tenant) => {
    const result = results.get(tenant)!;
    const admitted = admittedPerWindow(result);
    expect(admitted).toHaveLength(MEASURED);
    for (const n of admitted) expect(n).toBeLessThanOrEqual(L * 1.05);
    // The demand is three times R: the limit is used, not starved (a window rule keeps one
    // second of its rate back, and each fill is rounded down).
    for (const n of admitted) expect(n).toBeGreaterThanOrEqual(L * 0.8);
    expect(jain(result)).toBeGreaterThanOrEqual(0.95);
    expect(result.streamErrors).toEqual([]);
  });
});
