import { fleetScenario } from '../test/support/rlqsFleet.js';
import type { SimClient, SimResult, SimScenario, SimWindow } from '../test/support/rlqsSim.js';
import { simulatorBinary, simulate } from './rlqs.js';
import { check, openClients } from './rlsClient.js';
import { log } from './series.js';
import { BENCH_NODE, startTollgate, type NodeRuntime, type RedisServer } from './services.js';
import type { Scenario } from './scenarios.js';

/**
 * RLQS's over-admission bound (docs/rlqs.md), measured over long runs: the tests' fleet
 * simulator (test/rlqs/sim) plays Envoys on one bucket each, against one tollgate on the bench's
 * Redis, and the requests the clients admitted are counted per epoch-aligned window W and held
 * to the rule's L. Every scenario runs at once with the others, on a tenant of its own; all of
 * them join at the start of the same window, so that the first whole window is the join, then
 * `warmWindows` of warm-up (the join's included) and `measuredWindows` measured. The scenarios
 * run once in each of Envoy's shapes (SHAPES), one shape after the other.
 */
export interface RlqsBoundPlan {
  /** The rule's window W and limit L: L requests per W, fixed windows. */
  windowMs: number;
  limit: number;
  /** The shapes to run, by name (see SHAPES), in that order. */
  shapes: string[];
  /** Whole windows after the join that are not measured, the join's own included. */
  warmWindows: number;
  measuredWindows: number;
  /** The scenarios to run, by name (see SCENARIOS); all of them when absent. */
  only?: string[];
  /** The classic checks of the shared-counter scenario, a second. */
  classicRps: number;
}

/** Steady state: at most this over L, and at least STEADY_FLOOR of L, in every measured window. */
export const STEADY_OVER = 0.05;
export const STEADY_FLOOR = 0.9;

export const BOUND_DOMAIN = 'fleet';

/** How Envoy's filter reports, as the simulator plays it (test/rlqs/sim/semantics.go). */
export interface BoundShape {
  name: string;
  title: string;
  semantics: 'proto' | 'envoy-code';
  reportingIntervalMs: number;
}

export const SHAPES: BoundShape[] = [
  {
    name: 'released',
    title: 'Envoy as released (v1.40): a report every 5 s, time_elapsed in whole seconds',
    semantics: 'envoy-code',
    reportingIntervalMs: 5_000,
  },
  {
    name: 'filter-wide',
    title: 'one filter-wide reporting interval of 1 s, in whole seconds (envoy#47104)',
    semantics: 'envoy-code',
    reportingIntervalMs: 1_000,
  },
  {
    name: 'exact',
    title: "each bucket's reporting interval, 500 ms, with exact elapsed time (envoy#46723)",
    semantics: 'proto',
    reportingIntervalMs: 500,
  },
];

export function boundRulesYaml(plan: RlqsBoundPlan): string {
  return `# Written by bench/rlqsBound.ts for npm run bench.
domain: ${BOUND_DOMAIN}
descriptors:
  - key: ready
    rate_limit: {unit: hour, requests_per_unit: 4000000000}
  - key: tenant
    rate_limit: {requests_per_unit: ${plan.limit}, window: ${plan.windowMs / 1000}s, algorithm: fixed_window}
`;
}

const READY: Scenario['request'] = {
  domain: BOUND_DOMAIN,
  descriptors: [{ entries: [{ key: 'ready', value: 'probe' }] }],
};

/** Demand is three times the rule's rate R = L / W, for every fleet. */
const demandRps = (plan: RlqsBoundPlan) => (3 * plan.limit) / (plan.windowMs / 1000);

const equal = (n: number, total: number): SimClient[] => [
  { name: 'envoy', count: n, rps: total / n, jitter: 0.2, buckets: [] },
];
/** Client i of n asks for i + 1 shares: the last asks n times what the first does. */
const skewed = (n: number, total: number): SimClient[] =>
  Array.from({ length: n }, (_, i) => ({
    name: `envoy${i}`,
    rps: ((2 * total) / (n * (n + 1))) * (i + 1),
    jitter: 0.2,
    buckets: [],
  }));

interface BoundScenario {
  name: string;
  title: string;
  clients: (plan: RlqsBoundPlan) => SimClient[];
  /** Envoy's defaults: no no_assignment_behavior and no expired_assignment_behavior. */
  defaults?: boolean;
  /** Classic ShouldRateLimit checks on the same tenant. */
  classic?: boolean;
}

export const SCENARIOS: BoundScenario[] = [
  { name: 'solo', title: '1 client', clients: (p) => equal(1, demandRps(p)) },
  { name: 'equal4', title: '4 equal clients', clients: (p) => equal(4, demandRps(p)) },
  { name: 'equal16', title: '16 equal clients', clients: (p) => equal(16, demandRps(p)) },
  { name: 'skewed4', title: '4 skewed clients', clients: (p) => skewed(4, demandRps(p)) },
  { name: 'skewed16', title: '16 skewed clients', clients: (p) => skewed(16, demandRps(p)) },
  {
    name: 'shared',
    title: '4 equal clients + classic checks',
    clients: (p) => equal(4, demandRps(p)),
    classic: true,
  },
  {
    name: 'defaults',
    title: "4 equal clients, Envoy's defaults",
    clients: (p) => equal(4, demandRps(p)),
    defaults: true,
  },
];

export interface BoundWindow {
  startMs: number;
  /** The RLQS clients' admitted requests; the classic checks' OK answers beside them. */
  admitted: number;
  denied: number;
  classicAllowed: number;
  /** (admitted + classicAllowed) / L. */
  ofLimit: number;
}

export interface BoundEntry {
  /** The shape it ran in (SHAPES). */
  shape: string;
  scenario: string;
  title: string;
  clients: number;
  demandRps: number;
  defaults: boolean;
  /** The first whole window, in which every client joined. */
  join: BoundWindow | null;
  /** One assignment's worth: the tokens of each client's first assignment, summed. */
  firstAssignmentTokens: number;
  measured: BoundWindow[];
  maxOfLimit: number;
  minOfLimit: number;
  meanOfLimit: number;
  /** Jain's index of admitted / (admitted + denied) per client, over the measured windows. */
  jain: number;
  assignmentsChanged: number;
  assignmentsUnchanged: number;
  reportLatencyMs: { p50: number; p99: number; max: number };
  reportsSent: number;
  reconnects: number;
  streamErrors: number;
  streamErrorMessages: string[];
  /** Classic checks sent, and the ones that failed (not OK and not OVER_LIMIT). */
  classicSent?: number;
  classicFailed?: number;
  steadyMet: boolean;
  joinMet: boolean;
}

export interface RlqsBoundResults {
  plan: RlqsBoundPlan;
  service: { name: string; settings: Record<string, string>; node?: string };
  entries: BoundEntry[];
}

/** Windows that start at multiples of W since the epoch, as the simulator counts them. */
const windowOf = (atMs: number, windowMs: number) => atMs - (atMs % windowMs);

/**
 * ShouldRateLimit on the tenant at `rps` from `fromMs` until `untilMs` (epoch ms), counting the
 * allowed answers per epoch-aligned window of when each check was sent.
 */
async function classicLoad(
  address: string,
  tenant: string,
  rps: number,
  fromMs: number,
  untilMs: number,
  windowMs: number,
): Promise<{ allowed: Map<number, number>; sent: number; failed: number }> {
  const clients = openClients(address, 2);
  const allowed = new Map<number, number>();
  const pending: Promise<void>[] = [];
  let failed = 0;
  const request = {
    domain: BOUND_DOMAIN,
    descriptors: [{ entries: [{ key: 'tenant', value: tenant }] }],
  };
  try {
    for (let n = 0; ; n++) {
      const due = fromMs + (n * 1000) / rps;
      if (due >= untilMs) break;
      if (due > Date.now()) await new Promise((resolve) => setTimeout(resolve, due - Date.now()));
      const sentAt = Date.now();
      pending.push(
        check(clients[n % clients.length]!, request, 1_000).then((outcome) => {
          if (outcome === 'OK') {
            const window = windowOf(sentAt, windowMs);
            allowed.set(window, (allowed.get(window) ?? 0) + 1);
          } else if (outcome !== 'OVER_LIMIT') {
            failed += 1;
          }
        }),
      );
    }
    await Promise.all(pending);
    return { allowed, sent: pending.length, failed };
  } finally {
    for (const client of clients) client.close();
  }
}

function jainOf(windows: SimWindow[]): number {
  const admitted: Record<string, number> = {};
  const demand: Record<string, number> = {};
  for (const window of windows) {
    for (const [client, n] of Object.entries(window.admitted ?? {})) {
      admitted[client] = (admitted[client] ?? 0) + n;
      demand[client] = (demand[client] ?? 0) + n + (window.denied?.[client] ?? 0);
    }
  }
  const x = Object.keys(demand)
    .filter((client) => demand[client]! > 0)
    .map((client) => admitted[client]! / demand[client]!);
  const sum = x.reduce((a, b) => a + b, 0);
  const squares = x.reduce((a, b) => a + b * b, 0);
  return squares > 0 ? (sum * sum) / (x.length * squares) : NaN;
}

function entryOf(
  shape: BoundShape,
  scenario: BoundScenario,
  plan: RlqsBoundPlan,
  joinAtMs: number,
  result: SimResult,
  classic?: Awaited<ReturnType<typeof classicLoad>>,
): BoundEntry {
  const clients = scenario.clients(plan);
  const toWindow = (w: SimWindow): BoundWindow => {
    const classicAllowed = classic?.allowed.get(w.startMs) ?? 0;
    return {
      startMs: w.startMs,
      admitted: w.total.admitted,
      denied: w.total.denied,
      classicAllowed,
      ofLimit: (w.total.admitted + classicAllowed) / plan.limit,
    };
  };
  const joinWindow = windowOf(joinAtMs, plan.windowMs);
  const whole = result.windows.filter((w) => !w.partial && w.startMs >= joinWindow);
  const joined = whole[0]?.startMs === joinWindow ? whole[0] : undefined;
  const measuredSim = whole.slice(plan.warmWindows, plan.warmWindows + plan.measuredWindows);
  const measured = measuredSim.map(toWindow);
  const ratios = measured.map((w) => w.ofLimit);
  const firsts = new Map<string, number>();
  for (const a of result.assignments) {
    if (!firsts.has(a.client) && a.kind === 'token_bucket') firsts.set(a.client, a.maxTokens ?? 0);
  }
  const firstAssignmentTokens = [...firsts.values()].reduce((a, b) => a + b, 0);
  const join = joined ? toWindow(joined) : null;
  const maxOfLimit = ratios.length ? Math.max(...ratios) : NaN;
  const minOfLimit = ratios.length ? Math.min(...ratios) : NaN;
  return {
    shape: shape.name,
    scenario: scenario.name,
    title: scenario.title,
    clients: clients.reduce((sum, client) => sum + (client.count ?? 1), 0),
    demandRps: clients.reduce((sum, client) => sum + client.rps * (client.count ?? 1), 0),
    defaults: scenario.defaults === true,
    join,
    firstAssignmentTokens,
    measured,
    maxOfLimit,
    minOfLimit,
    meanOfLimit: ratios.length ? ratios.reduce((a, b) => a + b, 0) / ratios.length : NaN,
    jain: jainOf(measuredSim),
    assignmentsChanged: result.assignmentCounts.changed,
    assignmentsUnchanged: result.assignmentCounts.unchanged,
    reportLatencyMs: {
      p50: result.reports.latencyMs.p50,
      p99: result.reports.latencyMs.p99,
      max: result.reports.latencyMs.max,
    },
    reportsSent: result.reports.sent,
    reconnects: result.reconnectsTotal,
    streamErrors: result.streamErrors.length + result.streamErrorsUnlisted,
    streamErrorMessages: result.streamErrors.slice(0, 3).map((e) => `${e.code}: ${e.message}`),
    ...(classic ? { classicSent: classic.sent, classicFailed: classic.failed } : {}),
    steadyMet:
      measured.length === plan.measuredWindows &&
      maxOfLimit <= 1 + STEADY_OVER &&
      minOfLimit >= STEADY_FLOOR,
    joinMet:
      join !== null &&
      join.admitted + join.classicAllowed - plan.limit <= Math.max(firstAssignmentTokens, 0),
  };
}

export interface RlqsBoundOptions {
  extraEnv?: Record<string, string>;
  node?: NodeRuntime;
}

export async function runRlqsBound(
  redis: RedisServer,
  repoRoot: string,
  plan: RlqsBoundPlan,
  options: RlqsBoundOptions = {},
): Promise<RlqsBoundResults> {
  const binary = simulatorBinary(repoRoot);
  const service = await startTollgate({
    repoRoot,
    name: 'tollgate-rlqs',
    redisUrl: redis.url,
    workers: 1,
    rules: { yaml: boundRulesYaml(plan), ready: READY },
    ...(options.extraEnv ? { env: options.extraEnv } : {}),
    node: options.node ?? BENCH_NODE,
  });
  try {
    const entries: BoundEntry[] = [];
    for (const name of plan.shapes) {
      const shape = SHAPES.find((known) => known.name === name);
      if (shape === undefined) throw new Error(`rlqs bound: no shape named ${name}`);
      entries.push(...(await runShape(binary, service.address, plan, shape)));
    }
    return {
      plan,
      service: {
        name: service.name,
        settings: service.settings,
        ...(service.node ? { node: service.node } : {}),
      },
      entries,
    };
  } finally {
    await service.stop?.();
  }
}

/** Every scenario at once in one shape, each on a tenant of its own (named by shape and scenario). */
async function runShape(
  binary: string,
  address: string,
  plan: RlqsBoundPlan,
  shape: BoundShape,
): Promise<BoundEntry[]> {
  const scenarios = SCENARIOS.filter((s) => !plan.only || plan.only.includes(s.name));
  const tenant = (scenario: BoundScenario) => `${shape.name}-${scenario.name}`;
  const launchedAt = Date.now();
  // Every client joins a little into the next window at least 1.5 s away, so that the
  // simulators have started, and the join and its first assignment fall in one whole window.
  const joinAtMs = windowOf(launchedAt + 1_500, plan.windowMs) + plan.windowMs + 100;
  const startMs = joinAtMs - launchedAt;
  const windows = plan.warmWindows + plan.measuredWindows;
  const durationMs = startMs + windows * plan.windowMs + 300;
  log(
    `rlqs bound, ${shape.name}: ${scenarios.length} scenarios at once, W = ${plan.windowMs / 1000} s, ` +
      `${plan.warmWindows} + ${plan.measuredWindows} windows, about ${Math.round(durationMs / 1000)} s`,
  );
  const runs = scenarios.map((scenario) => {
    const sim: SimScenario = fleetScenario(
      address,
      tenant(scenario),
      scenario.clients(plan).map((client) => ({ ...client, startMs })),
      {
        domain: BOUND_DOMAIN,
        durationMs,
        windowMs: plan.windowMs,
        semantics: shape.semantics,
        reportingIntervalMs: shape.reportingIntervalMs,
        listUnchanged: false,
        assignmentLimit: 1_000,
      },
    );
    if (scenario.defaults) {
      delete sim.noAssignment;
      delete sim.expiredAssignment;
    }
    return simulate(binary, sim);
  });
  const classicScenario = scenarios.find((s) => s.classic);
  const classic = classicScenario
    ? classicLoad(
        address,
        tenant(classicScenario),
        plan.classicRps,
        joinAtMs,
        launchedAt + durationMs,
        plan.windowMs,
      )
    : undefined;
  const results = await Promise.all(runs);
  const classicResult = await classic;
  const entries = scenarios.map((scenario, at) =>
    entryOf(
      shape,
      scenario,
      plan,
      joinAtMs,
      results[at]!,
      scenario.classic ? classicResult : undefined,
    ),
  );
  for (const entry of entries) {
    log(
      `rlqs bound, ${shape.name}, ${entry.scenario}: max ${entry.maxOfLimit.toFixed(3)} L, ` +
        `min ${entry.minOfLimit.toFixed(3)} L, mean ${entry.meanOfLimit.toFixed(3)} L, ` +
        `join ${entry.join?.ofLimit.toFixed(3) ?? 'n/a'} L, Jain ${entry.jain.toFixed(3)}`,
    );
  }
  return entries;
}

/** What is missing or broken in a run, whatever its figures; the bound itself is judged apart. */
export function rlqsBoundProblems(results: RlqsBoundResults): string[] {
  const problems: string[] = [];
  if (results.entries.length === 0) problems.push('rlqsBound: not run');
  for (const entry of results.entries) {
    const where = `rlqsBound.${entry.shape}.${entry.scenario}`;
    if (entry.measured.length !== results.plan.measuredWindows) {
      problems.push(`${where}: ${entry.measured.length} measured windows`);
    }
    if (entry.join === null) problems.push(`${where}: no join window`);
    if (entry.measured.some((w) => w.admitted <= 0)) problems.push(`${where}: a window admitted 0`);
    if (entry.assignmentsChanged <= 0) problems.push(`${where}: no assignments`);
    if (entry.streamErrors > 0) problems.push(`${where}: ${entry.streamErrors} stream errors`);
    if (entry.classicSent !== undefined && entry.classicFailed! > 0.01 * entry.classicSent) {
      problems.push(
        `${where}: ${entry.classicFailed} of ${entry.classicSent} classic checks failed`,
      );
    }
  }
  return problems;
}

/**
 * The scenarios that broke the bound: outside 0.9-1.05 L at steady state, or over L by more than
 * one assignment's worth on a join.
 */
export function rlqsBoundMisses(results: RlqsBoundResults): string[] {
  const misses: string[] = [];
  for (const entry of results.entries) {
    if (!entry.steadyMet) {
      misses.push(
        `${entry.shape}, ${entry.scenario}: measured windows admitted ` +
          `${entry.minOfLimit.toFixed(3)}-${entry.maxOfLimit.toFixed(3)} L`,
      );
    }
    if (!entry.joinMet) {
      misses.push(
        `${entry.shape}, ${entry.scenario}: the join window admitted ${entry.join?.ofLimit.toFixed(3) ?? 'n/a'} L, ` +
          `one assignment's worth ${entry.firstAssignmentTokens}`,
      );
    }
  }
  return misses;
}
