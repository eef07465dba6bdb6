import type { SimClient, SimResult, SimScenario } from './rlqsSim.js';
import { codes, d, type ManualClock, type Tollgate } from './tollgate.js';

/**
 * What the RLQS fleet scenarios share: a rule of L per 10 s window (R = 200 a second), a 500 ms
 * reporting interval, the sample Envoy config's fallbacks, and the measures of a run.
 */
export const W = 10_000;
export const L = 2_000;
export const INTERVAL = 500;
export const WARM = 2;
export const MEASURED = 3;
/** The token-bucket rule of the tenant TOKEN_TENANT: R a second, a burst of a second of it. */
export const TOKEN_TENANT = 'token-bucket';
export const TOKEN_RATE = L / (W / 1000);
export const FLEET_RULES = `
domain: fleet
descriptors:
  - key: tenant
    value: ${TOKEN_TENANT}
    rate_limit: {requests_per_unit: ${TOKEN_RATE}, unit: second, algorithm: token_bucket}
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

/**
 * ShouldRateLimit on the fleet domain's `tenant` at `rps` until `untilMs` (epoch ms), beside an
 * RLQS fleet on the same tenant: the OK answers per epoch-aligned window, by when each was sent.
 */
export async function classicLoad(
  tollgate: Tollgate,
  tenant: string,
  rps: number,
  untilMs: number,
): Promise<Map<number, number>> {
  const allowed = new Map<number, number>();
  const pending: Promise<void>[] = [];
  const start = Date.now();
  for (let n = 0; Date.now() < untilMs; n++) {
    const due = start + (n * 1000) / rps;
    if (due > Date.now()) await new Promise((resolve) => setTimeout(resolve, due - Date.now()));
    const sentAt = Date.now();
    pending.push(
      tollgate.check({ domain: 'fleet', descriptors: [d('tenant', tenant)] }).then(
        (response) => {
          if (codes(response)[0] !== 'OK') return;
          const window = sentAt - (sentAt % W);
          allowed.set(window, (allowed.get(window) ?? 0) + 1);
        },
        () => undefined,
      ),
    );
  }
  await Promise.all(pending);
  return allowed;
}
