import {
  buildRlqsSim,
  runSimulation,
  type SimResult,
  type SimScenario,
} from '../test/support/rlqsSim.js';
import { track } from './children.js';
import type { Ghz } from './ghz.js';
import { readStat, treeCpuSeconds } from './procstat.js';
import { log } from './series.js';
import {
  BENCH_NODE,
  startTollgate,
  type NodeRuntime,
  type RedisServer,
  type Service,
} from './services.js';
import type { Scenario } from './scenarios.js';
import { median } from './stats.js';
import { alternate, VERSUS_BREAK } from './versusRounds.js';

/**
 * RLQS against classic checks: what tollgate's process spends serving Envoy's Rate Limit Quota
 * Service (`StreamRateLimitQuotas`, docs/rlqs.md) per 1,000 client requests, beside what it spends
 * per 1,000 `ShouldRateLimit` checks, on one tollgate, the same rules and the same Redis, in
 * rounds that alternate the two. The RLQS clients are the tests' fleet simulator
 * (test/rlqs/sim): each plays one Envoy's rate_limit_quota filter, decides its own requests from
 * tollgate's assignments and reports its buckets every reporting interval, so tollgate's work
 * follows the reports, not the requests. Its client requests are the admitted and denied totals
 * the simulator reports. The classic side is ghz at a constant rate. CPU is the tollgate
 * process's (and Redis's) utime + stime from /proc over each run.
 */
export interface RlqsPlan {
  /** Each run, RLQS and classic alike. */
  seconds: number;
  warmupSeconds: number;
  rounds: number;
  /** Simulated Envoys, one stream each, with one bucket `{tenant: tN}` each. */
  clients: number;
  /** The clients' buckets go to these many tenants in turn. */
  tenants: number;
  /** Requests a second each simulated Envoy decides. */
  clientRps: number;
  reportingIntervalMs: number;
  /** The tenant rule: this many requests a minute per tenant. */
  limitPerMinute: number;
  /** The classic side's constant rate, on 50 concurrent calls over 4 connections. */
  classicRps: number;
  /** tollgate with no load for this long, after the warm-up: the CPU it spends anyway. */
  idleSeconds: number;
}

export const RLQS_DOMAIN = 'rlqs-bench';

const ROOMY = 4_000_000_000;

export function rlqsRulesYaml(limitPerMinute: number): string {
  return `# Written by bench/rlqs.ts for npm run bench.
domain: ${RLQS_DOMAIN}
tenant_key: tenant
descriptors:
  - key: ready
    rate_limit: {unit: hour, requests_per_unit: ${ROOMY}}
  - key: tenant
    rate_limit: {name: tenant-per-minute, unit: minute, requests_per_unit: ${limitPerMinute}}
`;
}

const READY: Scenario['request'] = {
  domain: RLQS_DOMAIN,
  descriptors: [{ entries: [{ key: 'ready', value: 'probe' }] }],
};

/**
 * The classic checks: the same tenant rule, on tenants of their own (c0, c1, ...), so that the
 * RLQS clients' counters and the checks' do not spend each other's minute.
 */
function classicRequest(tenants: number): Scenario['request'] {
  return {
    domain: RLQS_DOMAIN,
    descriptors: [{ entries: [{ key: 'tenant', value: `c{{mod .RequestNumber ${tenants}}}` }] }],
  };
}

/** One run of one side. */
export interface RlqsRun {
  side: 'rlqs' | 'classic';
  round: number;
  seconds: number;
  /** Client requests: the simulator's admitted + denied, or ghz's calls. */
  requests: number;
  /** RLQS: admitted by the clients; classic: answered OK (allowed or over the limit). */
  admitted: number;
  denied: number;
  /** Classic: calls that did not answer OK; RLQS: stream errors. */
  errors: number;
  serviceCpuSeconds: number;
  redisCpuSeconds: number | null;
  /** ms of CPU per 1,000 client requests (= µs per request). */
  serviceMsPer1000: number;
  redisMsPer1000: number | null;
  /** Classic: ghz's status codes, OK included; RLQS: the streams' error codes. */
  codes: Record<string, number>;
  /** RLQS only: the first stream errors' messages. */
  errorMessages?: string[];
  /** RLQS only: usage reports the clients sent, by why, and the assignments they received. */
  reports?: number;
  reportsBy?: { immediate: number; periodic: number; onAssignment: number };
  assignments?: number;
  /** Assignments that changed the bucket's strategy, rather than only extending its TTL. */
  assignmentsChanged?: number;
  reportLatencyP99Ms?: number;
}

export interface RlqsSideSummary {
  side: 'rlqs' | 'classic';
  /** Medians over the rounds. */
  serviceMsPer1000: number;
  redisMsPer1000: number | null;
  requestsPerSecond: number;
}

export interface RlqsResults {
  plan: RlqsPlan;
  service: { name: string; title: string; settings: Record<string, string>; node?: string };
  runs: RlqsRun[];
  rlqs: RlqsSideSummary;
  classic: RlqsSideSummary;
  /** RLQS's service CPU per 1,000 requests over the classic's; null when either is missing. */
  ratio: number | null;
  /** tollgate's CPU with no load, in ms per second (timers, health, the rules poll). */
  idleMsPerSecond: number;
}

/** The fleet simulator's binary, built once per version of its sources by scripts/rlqs-sim.mjs. */
export const simulatorBinary = buildRlqsSim;

/** Runs one scenario to its end, the simulator stopped with the bench's other children. */
export function simulate(binary: string, scenario: SimScenario): Promise<SimResult> {
  return runSimulation(scenario, { binary, onSpawn: (child) => void track(child) });
}

function scenarioOf(address: string, plan: RlqsPlan, seconds: number, seed: number): SimScenario {
  // Clients of one tenant are consecutive in the expansion, so they are listed per tenant.
  const perTenant = Math.ceil(plan.clients / plan.tenants);
  const clients: SimScenario['clients'] = [];
  for (let tenant = 0, left = plan.clients; left > 0; tenant += 1, left -= perTenant) {
    clients.push({
      name: `envoy-t${tenant}`,
      buckets: [{ tenant: `t${tenant}` }],
      rps: plan.clientRps,
      jitter: 0.2,
      count: Math.min(perTenant, left),
      // The streams open over the first reporting interval, as a fleet's would not all at once.
      spreadMs: plan.reportingIntervalMs,
    });
  }
  return {
    addr: address,
    domain: RLQS_DOMAIN,
    durationMs: Math.round(seconds * 1000),
    windowMs: 60_000,
    reportingIntervalMs: plan.reportingIntervalMs,
    perClient: false,
    assignmentLimit: 0,
    seed,
    clients,
  };
}

function cpuOf(service: Service, redis: RedisServer): { service: number; redis?: number } {
  const redisCpu = readStat(redis.pid)?.cpuSeconds;
  return {
    service: treeCpuSeconds(service.pid),
    ...(redisCpu === undefined ? {} : { redis: redisCpu }),
  };
}

function perThousand(cpuSeconds: number, requests: number): number {
  return requests > 0 ? (cpuSeconds * 1e6) / requests : NaN;
}

function finish(
  run: Omit<
    RlqsRun,
    'serviceCpuSeconds' | 'redisCpuSeconds' | 'serviceMsPer1000' | 'redisMsPer1000'
  >,
  before: ReturnType<typeof cpuOf>,
  after: ReturnType<typeof cpuOf>,
): RlqsRun {
  const serviceCpuSeconds = after.service - before.service;
  const redisCpuSeconds =
    before.redis !== undefined && after.redis !== undefined ? after.redis - before.redis : null;
  return {
    ...run,
    serviceCpuSeconds,
    redisCpuSeconds,
    serviceMsPer1000: perThousand(serviceCpuSeconds, run.requests),
    redisMsPer1000: redisCpuSeconds === null ? null : perThousand(redisCpuSeconds, run.requests),
  };
}

async function rlqsRound(
  binary: string,
  service: Service,
  redis: RedisServer,
  plan: RlqsPlan,
  round: number,
): Promise<RlqsRun> {
  const before = cpuOf(service, redis);
  const result = await simulate(binary, scenarioOf(service.address, plan, plan.seconds, round));
  const after = cpuOf(service, redis);
  const admitted = result.windows.reduce((sum, window) => sum + window.total.admitted, 0);
  const denied = result.windows.reduce((sum, window) => sum + window.total.denied, 0);
  const counts = result.assignmentCounts;
  const codes: Record<string, number> = {};
  for (const error of result.streamErrors) codes[error.code] = (codes[error.code] ?? 0) + 1;
  return finish(
    {
      side: 'rlqs',
      round,
      seconds: (result.endMs - result.startMs) / 1000,
      requests: admitted + denied,
      admitted,
      denied,
      errors: result.streamErrors.length + result.streamErrorsUnlisted,
      codes,
      errorMessages: result.streamErrors.slice(0, 3).map((e) => `${e.code}: ${e.message}`),
      reports: result.reports.sent,
      reportsBy: {
        immediate: result.reports.immediate,
        periodic: result.reports.periodic,
        onAssignment: result.reports.onAssignment,
      },
      assignments: counts.changed + counts.unchanged + counts.ignored,
      assignmentsChanged: counts.changed,
      reportLatencyP99Ms: result.reports.latencyMs.p99,
    },
    before,
    after,
  );
}

async function classicRound(
  ghz: Ghz,
  service: Service,
  redis: RedisServer,
  plan: RlqsPlan,
  round: number,
): Promise<RlqsRun> {
  const before = cpuOf(service, redis);
  const result = await ghz.run({
    address: service.address,
    request: classicRequest(plan.tenants),
    seconds: plan.seconds,
    rps: plan.classicRps,
    concurrency: 50,
    connections: 4,
    timeoutMs: 1_000,
  });
  const after = cpuOf(service, redis);
  const ok = result.statusCodes.OK ?? 0;
  return finish(
    {
      side: 'classic',
      round,
      seconds: result.totalSeconds,
      requests: result.count,
      // An over-limit answer is OK too; the tenants' rule is far above the classic rate.
      admitted: ok,
      denied: 0,
      errors: result.count - ok,
      codes: result.statusCodes,
    },
    before,
    after,
  );
}

function summarize(side: RlqsRun['side'], runs: RlqsRun[]): RlqsSideSummary {
  const mine = runs.filter((run) => run.side === side);
  const redis = mine.map((run) => run.redisMsPer1000).filter((v): v is number => v !== null);
  return {
    side,
    serviceMsPer1000: mine.length ? median(mine.map((run) => run.serviceMsPer1000)) : NaN,
    redisMsPer1000: redis.length ? median(redis) : null,
    requestsPerSecond: mine.length ? median(mine.map((run) => run.requests / run.seconds)) : NaN,
  };
}

export interface RlqsOptions {
  /** Settings beside the row's own (`--env`). */
  extraEnv?: Record<string, string>;
  node?: NodeRuntime;
}

export async function runRlqs(
  ghz: Ghz,
  redis: RedisServer,
  repoRoot: string,
  plan: RlqsPlan,
  options: RlqsOptions = {},
): Promise<RlqsResults> {
  const binary = simulatorBinary(repoRoot);
  const service = await startTollgate({
    repoRoot,
    name: 'tollgate-rlqs',
    redisUrl: redis.url,
    workers: 1,
    rules: { yaml: rlqsRulesYaml(plan.limitPerMinute), ready: READY },
    // Fixed windows, as the comparison's tollgate-fixed, but the bench's generous REDIS_TIMEOUT
    // (100ms) rather than tollgate's 15ms: on two shared cores a check past 15 ms fails, and this
    // row measures CPU, not the tail.
    env: { DEFAULT_ALGORITHM: 'fixed_window', ...options.extraEnv },
    node: options.node ?? BENCH_NODE,
  });
  try {
    log(`rlqs: warm-up, ${plan.warmupSeconds} s of each side`);
    await ghz.run({
      address: service.address,
      request: classicRequest(plan.tenants),
      seconds: plan.warmupSeconds,
      rps: plan.classicRps,
      concurrency: 50,
      connections: 4,
      timeoutMs: 1_000,
    });
    await simulate(binary, scenarioOf(service.address, plan, plan.warmupSeconds, 0));
    log(`rlqs: ${plan.idleSeconds} s with no load`);
    const idleBefore = treeCpuSeconds(service.pid);
    const idleStarted = performance.now();
    await new Promise((resolve) => setTimeout(resolve, plan.idleSeconds * 1000));
    const idleMsPerSecond =
      ((treeCpuSeconds(service.pid) - idleBefore) * 1e6) / (performance.now() - idleStarted);
    const runs: RlqsRun[] = [];
    for (const { round, item: side } of alternate(['classic', 'rlqs'] as const, plan.rounds)) {
      log(`rlqs, round ${round}/${plan.rounds}: ${side}, ${plan.seconds} s`);
      runs.push(
        side === 'rlqs'
          ? await rlqsRound(binary, service, redis, plan, round)
          : await classicRound(ghz, service, redis, plan, round),
      );
    }
    const rlqs = summarize('rlqs', runs);
    const classic = summarize('classic', runs);
    const ratio =
      Number.isFinite(rlqs.serviceMsPer1000) && classic.serviceMsPer1000 > 0
        ? rlqs.serviceMsPer1000 / classic.serviceMsPer1000
        : null;
    log(
      `rlqs: tollgate spent ${rlqs.serviceMsPer1000.toFixed(1)} ms of CPU per 1,000 RLQS client requests ` +
        `and ${classic.serviceMsPer1000.toFixed(1)} ms per 1,000 classic checks (${ratio?.toFixed(3) ?? 'n/a'}×)`,
    );
    return {
      plan,
      service: {
        name: service.name,
        title: 'tollgate, fixed windows, RLQS and ShouldRateLimit on one process',
        settings: service.settings,
        ...(service.node ? { node: service.node } : {}),
      },
      runs,
      rlqs,
      classic,
      ratio,
      idleMsPerSecond,
    };
  } finally {
    await service.stop?.();
  }
}

/** What is missing or wrong in the row, for missingFields and the `--rlqs` run. */
export function rlqsProblems(results: RlqsResults): string[] {
  const problems: string[] = [];
  for (const side of ['rlqs', 'classic'] as const) {
    const runs = results.runs.filter((run) => run.side === side);
    if (runs.length === 0) problems.push(`rlqs.${side}: not run`);
    for (const run of runs) {
      const where = `rlqs.${side}[${run.round}]`;
      if (run.requests <= 0) problems.push(`${where}: no requests`);
      if (!Number.isFinite(run.serviceMsPer1000)) problems.push(`${where}: no service CPU`);
      // As the comparison's break: a store call past REDIS_TIMEOUT on busy cores fails a check,
      // or ends a stream (which the client opens again); more than 1% is a fault of the run.
      const calls = side === 'rlqs' ? (run.reports ?? 0) : run.requests;
      if (run.errors > VERSUS_BREAK.maxErrorRate * calls) {
        problems.push(
          `${where}: ${run.errors} errors of ${calls} ${side === 'rlqs' ? 'reports' : 'calls'}`,
        );
      }
      if (side === 'rlqs' && !(run.reports! > 0)) problems.push(`${where}: no reports sent`);
      if (side === 'rlqs' && !(run.assignments! > 0)) problems.push(`${where}: no assignments`);
    }
  }
  if (results.ratio === null) problems.push('rlqs.ratio: missing');
  if (!Number.isFinite(results.idleMsPerSecond)) problems.push('rlqs.idleMsPerSecond: missing');
  return problems;
}
