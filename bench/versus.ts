import { checkAdmission, type AdmissionResult } from './admission.js';
import type { Ghz } from './ghz.js';
import { measure, type Measured, type RunResult } from './measure.js';
import type { Plan } from './plan.js';
import { log } from './series.js';
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
  costOf,
  medianCost,
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
 * Two floors run the constant rates up to `costRps` beside them, with no Redis and no work: a
 * bare grpc-js server, and a bare node:http2 server framing gRPC by hand. They show what any
 * server on grpc-js, or any Node server at all, spends per call and adds to the tail.
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
  /** A bare server: no closed loop, no Redis, tiers up to the cost tier only. */
  floor?: boolean;
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
    const floors: Service[] = [
      await startBare(benchDir, 'grpc-js', node),
      await startBare(benchDir, 'http2', node),
    ];
    started.push(...floors);
    for (const floor of floors) timeouts.set(floor.name, 'no Redis');
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
  floors: Service[],
  plan: VersusPlan,
  runs: RunResult[],
): Promise<VersusEntry[]> {
  const closed = { concurrency: plan.concurrency, connections: plan.connections, timeoutMs: 5_000 };
  const everyService = [...targets.map((target) => target.service), ...floors];
  for (const service of everyService) {
    await ghz.run({
      ...closed,
      seconds: plan.warmupSeconds,
      address: service.address,
      request: scenario.request,
    });
  }
  const entries = new Map<string, VersusEntry>(
    everyService.map((service) => [
      service.name,
      {
        service: service.name,
        ...(floors.includes(service) ? { floor: true } : {}),
        closedLoop: summarizeClosedLoop([]),
        cost: null,
        tiers: [],
        breakRps: null,
      },
    ]),
  );
  const closedRuns = new Map<string, RunResult[]>();
  for (const { round, item: target } of alternate(targets, plan.rounds)) {
    log(`versus ${scenario.name}, closed loop ${round}/${plan.rounds}: ${target.service.name}`);
    const run = await measure(ghz, target, scenario, { ...closed, seconds: plan.closedSeconds });
    runs.push(run);
    closedRuns.set(target.service.name, [...(closedRuns.get(target.service.name) ?? []), run]);
  }
  for (const [name, serviceRuns] of closedRuns) {
    entries.get(name)!.closedLoop = summarizeClosedLoop(serviceRuns);
  }
  const load = {
    concurrency: plan.concurrency,
    connections: plan.connections,
    timeoutMs: plan.timeoutMs,
  };
  const floorTargets: Measured[] = floors.map((service) => ({ service }));
  for (const rps of plan.tiers) {
    const tierTargets = (rps <= plan.costRps ? [...targets, ...floorTargets] : targets).filter(
      (target) =>
        !entries.get(target.service.name)!.tiers.some((tier) => tier.verdict === 'past-break'),
    );
    const tierRuns = new Map<string, RunResult[]>();
    for (const { round, item: target } of alternate(tierTargets, plan.tierRounds)) {
      log(
        `versus ${scenario.name}, ${rps} req/s, round ${round}/${plan.tierRounds}: ${target.service.name}`,
      );
      const run = await measure(ghz, target, scenario, { ...load, rps, seconds: plan.tierSeconds });
      runs.push(run);
      tierRuns.set(target.service.name, [...(tierRuns.get(target.service.name) ?? []), run]);
    }
    for (const [name, serviceRuns] of tierRuns) {
      const entry = entries.get(name)!;
      const tier = summarizeTier(rps, serviceRuns);
      const verdict = entry.breakRps !== null ? 'past-break' : tierBroke(tier) ? 'break' : 'ok';
      if (verdict === 'break') entry.breakRps = rps;
      entry.tiers.push({ ...tier, verdict });
      if (rps === plan.costRps) entry.cost = medianCost(serviceRuns.map(costOf));
    }
  }
  return [...entries.values()];
}
