import { checkAdmission, type AdmissionResult } from './admission.js';
import type { Ghz } from './ghz.js';
import type { BareKind } from './bareServer.js';
import { measure, type Measured, type RunResult } from './measure.js';
import type { Plan } from './plan.js';
import type { Scenario } from './scenarios.js';
import { JUDGED, REDIS_COST_TIERS } from './results.js';
import { log } from './series.js';
import { summarizeTail, type LoopWindow } from './tailDiagnostics.js';
import {
  BENCH_NODE,
  startBare,
  startReference,
  startTollgate,
  type NodeRuntime,
  type RedisServer,
  type Service,
} from './services.js';
import {
  alternate,
  hasClosedLoop,
  summarizeClosedLoop,
  summarizeTier,
  tierBroke,
  type ClosedLoop,
  type VersusCost,
  type VersusTier,
} from './versusRounds.js';
import {
  VERSUS_READY,
  VERSUS_RULES_YAML,
  VERSUS_SCENARIOS,
  admissionRequest,
} from './versusScenarios.js';

export type { VersusCost, VersusTier } from './versusRounds.js';

/**
 * tollgate against envoyproxy/ratelimit, side by side on the same Redis and rules: the
 * reference, tollgate with fixed windows (the reference's semantics, which the targets compare),
 * tollgate as shipped (sliding windows), and, with `--against`, tollgate at another revision with
 * fixed windows. Each keeps its own default REDIS_TIMEOUT. For one and for three descriptors:
 * - closed-loop throughput, in rounds that alternate the services, with the service's and
 *   Redis's CPU per decision;
 * - constant arrival rates, tier by tier: at each tier every service runs once per round, the
 *   rounds alternating the services, and each service goes up to one tier past its own break
 *   (more than 1% errors, or under 95% of the offered rate achieved, over its rounds);
 * - at `costRps`, what a decision costs: the service's CPU and Redis's CPU in µs, from /proc, and
 *   the Redis commands per request from INFO commandstats, a script's inner commands included.
 *
 * Three floors run the constant rates beside them, deciding nothing (bareServer.ts): a bare
 * grpc-js server, up to `costRps` (its CPU per call there is its figure); a bare node:http2 server
 * framing gRPC by hand, the floor the p99 targets compare with; and the same with one Redis round
 * trip per call, to tell what the round trip alone adds to the tail. The two node:http2 ones run
 * at every tier where a service still runs, past their own break too. They show what any server
 * on grpc-js, or any Node server at all, spends per call and adds to the tail. A fourth, the
 * commands floor, makes per call one FCALL of exactly the commands of an exact decision on hash
 * counters (TIME, HMGET, HSET), at the rates where Redis's CPU is judged and in the closed loop:
 * the least Redis spends on any such design, beside what the reference's costs.
 */
export interface VersusPlan {
  closedSeconds: number;
  warmupSeconds: number;
  /** Closed-loop rounds. */
  rounds: number;
  tierSeconds: number;
  /** Runs of each service at each constant rate; its p99 there is their median. */
  tierRounds: number;
  tiers: number[];
  /** The tier whose runs give the cost per decision. */
  costRps: number;
  concurrency: number;
  connections: number;
  /** Calls still waiting past this fail. */
  timeoutMs: number;
}

export interface VersusEntry {
  service: string;
  /**
   * A bare server: without Redis, or with one round trip per call (neither runs the closed loop),
   * or with one call of an exact decision's commands.
   */
  floor?: FloorRedis;
  closedLoop: ClosedLoop;
  cost: VersusCost | null;
  tiers: VersusTier[];
  breakRps: number | null;
}

export interface VersusScenario {
  scenario: string;
  title: string;
  entries: VersusEntry[];
}

export interface VersusResults {
  services: {
    name: string;
    title: string;
    redisTimeout: string;
    settings: Record<string, string>;
    /** The version of the Node that ran it; absent for the reference (Go). */
    node?: string;
  }[];
  /** The constant rate whose runs give the cost per decision. */
  costRps: number;
  scenarios: VersusScenario[];
  /** The over-admission check on each service that decides in Redis. */
  admission: AdmissionResult[];
  runs: RunResult[];
  /** With `--tail-diagnostics`: the service whose event loop and GC each tier reports. */
  tailDiagnostics?: string;
}

export type FloorRedis = 'no-redis' | 'one-round-trip' | 'exact-commands';

/**
 * The floors, each with the tiers it runs: every tier where a service still runs, only up to the
 * cost tier and its own break, or only where Redis's CPU per decision is judged.
 */
type FloorTiers = 'every' | 'up-to-cost' | 'redis-cost';
const FLOORS: { kind: BareKind; redis: FloorRedis; tiers: FloorTiers }[] = [
  { kind: 'grpc-js', redis: 'no-redis', tiers: 'up-to-cost' },
  { kind: 'http2', redis: 'no-redis', tiers: 'every' },
  { kind: 'http2-redis', redis: 'one-round-trip', tiers: 'every' },
  { kind: 'http2-commands', redis: 'exact-commands', tiers: 'redis-cost' },
];

const FLOOR_TIMEOUTS: Record<FloorRedis, string> = {
  'no-redis': 'no Redis',
  'one-round-trip': 'none (one EVALSHA per call)',
  'exact-commands': 'none (one FCALL per call)',
};

interface Floor {
  target: Measured;
  redis: FloorRedis;
  tiers: FloorTiers;
}

/** Another revision of tollgate, built by against.ts, measured as one more service. */
export interface AgainstBuild {
  /** `tollgate@SHORT_SHA`. */
  name: `tollgate@${string}`;
  ref: string;
  sha: string;
  /** Its checkout, with dist/ built and node_modules installed. */
  root: string;
}

export interface VersusOptions {
  /** Settings for every tollgate, beside the bench's own (a lever to try). */
  extraEnv?: Record<string, string>;
  /** The Node for the tollgates and the floors. */
  node?: NodeRuntime;
  against?: AgainstBuild;
  admission: Plan['admission'];
  /** Watch the judged tollgate's event loop and GC at each constant rate (tailDiagnostics.ts). */
  tailDiagnostics?: boolean;
}

async function startServices(
  redis: RedisServer,
  repoRoot: string,
  options: VersusOptions,
): Promise<{ services: Service[]; timeouts: Map<string, string> }> {
  const rules = { yaml: VERSUS_RULES_YAML, ready: VERSUS_READY };
  const timeouts = new Map<string, string>();
  const services: Service[] = [];
  services.push(await startReference(repoRoot, redis));
  timeouts.set('reference', '10s (its default)');
  const fixed = { DEFAULT_ALGORITHM: 'fixed_window' };
  const tollgates = [
    {
      name: 'tollgate-fixed',
      title: 'tollgate, fixed windows (DEFAULT_ALGORITHM=fixed_window)',
      env: fixed,
      root: repoRoot,
    },
    {
      name: 'tollgate-sliding',
      title: 'tollgate as shipped (sliding windows)',
      env: {},
      root: repoRoot,
    },
    ...(options.against
      ? [
          {
            name: options.against.name,
            title: `tollgate at ${options.against.ref} (${options.against.sha.slice(0, 12)}), fixed windows`,
            env: fixed,
            root: options.against.root,
          },
        ]
      : []),
  ] as const;
  for (const { name, title, env, root } of tollgates) {
    const service = await startTollgate({
      repoRoot: root,
      name,
      redisUrl: redis.url,
      workers: 1,
      rules,
      // tollgate's own default, rather than the bench's generous one.
      env: { ...env, REDIS_TIMEOUT: '15ms', ...options.extraEnv },
      node: options.node ?? BENCH_NODE,
      loopDelay: (options.tailDiagnostics ?? false) && name === JUDGED,
    });
    services.push({ ...service, title });
    timeouts.set(name, '15ms (its default)');
  }
  return { services, timeouts };
}

export async function runVersus(
  ghz: Ghz,
  redis: RedisServer,
  repoRoot: string,
  benchDir: string,
  plan: VersusPlan,
  options: VersusOptions,
): Promise<VersusResults> {
  const started: Service[] = [];
  try {
    const { services, timeouts } = await startServices(redis, repoRoot, options);
    started.push(...services);
    const targets: Measured[] = services.map((service) => ({ service, redis }));
    const node = options.node ?? BENCH_NODE;
    const floors: Floor[] = [];
    for (const { kind, redis: floorRedis, tiers } of FLOORS) {
      const withRedis = floorRedis !== 'no-redis';
      const service = await startBare(benchDir, kind, node, withRedis ? redis.url : undefined);
      started.push(service);
      floors.push({
        target: withRedis ? { service, redis } : { service },
        redis: floorRedis,
        tiers,
      });
      timeouts.set(service.name, FLOOR_TIMEOUTS[floorRedis]);
    }
    const runs: RunResult[] = [];
    const scenarios: VersusScenario[] = [];
    for (const scenario of VERSUS_SCENARIOS) {
      const entries = await runScenario(ghz, scenario, targets, floors, plan, runs);
      scenarios.push({ scenario: scenario.name, title: scenario.title, entries });
    }
    const admission: AdmissionResult[] = [];
    for (const { service } of targets) {
      log(`versus over-admission check: ${service.name}`);
      admission.push(
        await checkAdmission(service, ghz, options.admission, {
          request: admissionRequest(service.name),
          load: VERSUS_SCENARIOS[0]!.request,
        }),
      );
    }
    return {
      services: started.map((service) => ({
        name: service.name,
        title: service.title,
        redisTimeout: timeouts.get(service.name) ?? '',
        settings: service.settings,
        ...(service.node ? { node: service.node } : {}),
      })),
      costRps: plan.costRps,
      scenarios,
      admission,
      runs,
      ...(options.tailDiagnostics ? { tailDiagnostics: JUDGED } : {}),
    };
  } finally {
    await Promise.all(started.map((service) => service.stop?.()));
  }
}

type VersusScenarioDef = (typeof VERSUS_SCENARIOS)[number];

/** One scenario: warm-ups, the closed-loop rounds, then the constant rates tier by tier. */
async function runScenario(
  ghz: Ghz,
  scenario: VersusScenarioDef,
  targets: Measured[],
  floors: Floor[],
  plan: VersusPlan,
  runs: RunResult[],
): Promise<VersusEntry[]> {
  const closed = { concurrency: plan.concurrency, connections: plan.connections, timeoutMs: 5_000 };
  const everyService = [...targets, ...floors.map((floor) => floor.target)].map((t) => t.service);
  for (const service of everyService) {
    await ghz.run({
      ...closed,
      seconds: plan.warmupSeconds,
      address: service.address,
      request: scenario.request,
    });
  }
  const floorOf = new Map(floors.map((floor) => [floor.target.service.name, floor.redis]));
  const entries = new Map<string, VersusEntry>(
    everyService.map((service) => [
      service.name,
      {
        service: service.name,
        ...(floorOf.has(service.name) ? { floor: floorOf.get(service.name)! } : {}),
        closedLoop: summarizeClosedLoop([]),
        cost: null,
        tiers: [],
        breakRps: null,
      },
    ]),
  );
  const closedRuns = new Map<string, RunResult[]>();
  const closedLoop = [
    ...targets,
    ...floors.filter((floor) => hasClosedLoop({ floor: floor.redis })).map((f) => f.target),
  ];
  for (const { round, item: target } of alternate(closedLoop, plan.rounds)) {
    log(`versus ${scenario.name}, closed loop ${round}/${plan.rounds}: ${target.service.name}`);
    const run = await measure(ghz, target, scenario, { ...closed, seconds: plan.closedSeconds });
    runs.push(run);
    closedRuns.set(target.service.name, [...(closedRuns.get(target.service.name) ?? []), run]);
  }
  for (const [name, serviceRuns] of closedRuns) {
    entries.get(name)!.closedLoop = summarizeClosedLoop(serviceRuns);
  }
  const running = (target: Measured) =>
    !entries.get(target.service.name)!.tiers.some((tier) => tier.verdict === 'past-break');
  for (const rps of plan.tiers) {
    const services = targets.filter(running);
    // The floors of every tier stand beside any service still running, past their own break
    // too, so that every p99 of a service has the floor's of the same rounds to compare with.
    const floorRuns = (floor: Floor) =>
      floor.tiers === 'every'
        ? services.length > 0
        : floor.tiers === 'redis-cost'
          ? REDIS_COST_TIERS.includes(rps) && services.length > 0
          : rps <= plan.costRps && running(floor.target);
    const atTier = [...services, ...floors.filter(floorRuns).map((floor) => floor.target)];
    if (atTier.length > 0) await runTier(ghz, scenario, atTier, rps, plan, runs, entries);
  }
  return [...entries.values()];
}

/** Every service at one constant rate, in alternating rounds; each entry gets its tier. */
async function runTier(
  ghz: Ghz,
  scenario: VersusScenarioDef,
  targets: Measured[],
  rps: number,
  plan: VersusPlan,
  runs: RunResult[],
  entries: Map<string, VersusEntry>,
): Promise<void> {
  const load = {
    concurrency: plan.concurrency,
    connections: plan.connections,
    timeoutMs: plan.timeoutMs,
    rps,
    seconds: plan.tierSeconds,
  };
  const tierRuns = new Map<string, RunResult[]>();
  const windows = new Map<string, LoopWindow[]>();
  for (const { round, item: target } of alternate(targets, plan.tierRounds)) {
    const name = target.service.name;
    log(`versus ${scenario.name}, ${rps} req/s, round ${round}/${plan.tierRounds}: ${name}`);
    const { run, window } = await measureWatched(ghz, target, scenario, load);
    runs.push(run);
    tierRuns.set(name, [...(tierRuns.get(name) ?? []), run]);
    if (window) windows.set(name, [...(windows.get(name) ?? []), window]);
  }
  for (const [name, serviceRuns] of tierRuns) {
    const entry = entries.get(name)!;
    const tier = summarizeTier(rps, serviceRuns);
    const tail = summarizeTail(windows.get(name) ?? []);
    const verdict = entry.breakRps !== null ? 'past-break' : tierBroke(tier) ? 'break' : 'ok';
    if (verdict === 'break') entry.breakRps = rps;
    entry.tiers.push({ ...tier, ...(tail ? { tail } : {}), verdict });
    if (rps === plan.costRps) entry.cost = tier.cost;
  }
}

/** A measured run, framed by the service's loop probe when it has one. */
async function measureWatched(
  ghz: Ghz,
  target: Measured,
  scenario: Scenario,
  load: Parameters<typeof measure>[3],
): Promise<{ run: RunResult; window?: LoopWindow }> {
  const probe = target.service.loopProbe;
  // The first window, since the last run, is only closed: what is counted is the run's.
  await probe?.window();
  const run = await measure(ghz, target, scenario, load);
  return probe ? { run, window: await probe.window() } : { run };
}
