import type { SimClient, SimResult, SimScenario } from './rlqsSim.js';
import type { ManualClock } from './tollgate.js';

/**
 * What the RLQS fleet scenarios share: a rule of L per 10 s window (R = 200 a second), a 500 ms
 * reporting interval, the sample Envoy config's fallbacks, and the measures of a run.
 */
export const W = 10_000;
export const L = 2_000;
export const INTERVAL = 500;
export const WARM = 2;
export const MEASURED = 3;
export const FLEET_RULES = `
domain: fleet
descriptors:
  - key: tenant
    rate_limit: {requests_per_unit: ${L}, window: 10s, algorithm: fixed_window}
`;

/** The service's clock is the real one: the simulated Envoys run in real time. */
export const realClock: ManualClock = {
  get now() {
    return Date.now();
  },
  advance() {
    throw new Error('the fleet runs in real time');
  },
};

/** A scenario of `clients` on the bucket {tenant}, long enough for warm-up and the measure. */
export function fleetScenario(
  addr: string,
  tenant: string,
  clients: SimClient[],
  extra: Partial<SimScenario> = {},
): SimScenario {
  return {
    addr,
    domain: 'fleet',
    // Starts a little into a window, so that the first full window is warm-up.
    durationMs: (WARM + MEASURED + 1) * W,
    windowMs: W,
    reportingIntervalMs: INTERVAL,
    // The sample config's fallbacks (envoy/envoy-rlqs.yaml), scaled to these rates.
    noAssignment: { tokenBucket: { maxTokens: 5, tokensPerFill: 5, fillIntervalMs: 1000 } },
    expiredAssignment: { reuseLast: true, timeoutMs: 300_000 },
    listUnchanged: true,
    assignmentLimit: 5_000,
    seed: 7,
    ...extra,
    clients: clients.map((client) => ({ ...client, buckets: [{ tenant }] })),
  };
}

/** The windows after warm-up that the run covered whole. */
export function measuredWindows(result: SimResult, warm = WARM, measured = MEASURED) {
  return result.windows.filter((w) => !w.partial).slice(warm, warm + measured);
}

/** Jain's fairness index of admitted over demand (admitted plus denied), per client. */
export function jain(result: SimResult): number {
  const admitted: Record<string, number> = {};
  const demand: Record<string, number> = {};
  for (const window of measuredWindows(result)) {
    for (const [client, n] of Object.entries(window.admitted ?? {})) {
      admitted[client] = (admitted[client] ?? 0) + n;
      demand[client] = (demand[client] ?? 0) + n + (window.denied?.[client] ?? 0);
    }
  }
  const x = Object.keys(demand).map((client) => admitted[client]! / demand[client]!);
  const sum = x.reduce((a, b) => a + b, 0);
  return (sum * sum) / (x.length * x.reduce((a, b) => a + b * b, 0));
}

/** `n` equal clients, 600 requests a second between them: three times R. */
export const equalClients = (n: number): SimClient[] => [
  { name: 'envoy', count: n, rps: 600 / n, jitter: 0.2, buckets: [] },
];

/** `n` clients whose demands are 1, 2, ... n parts of 1,200 a second over n(n + 1)/2. */
export const skewedClients = (n: number): SimClient[] =>
  Array.from({ length: n }, (_, i) => ({
    name: `envoy${i}`,
    rps: (1200 / (n * (n + 1))) * (i + 1),
    jitter: 0.2,
    buckets: [],
  }));
