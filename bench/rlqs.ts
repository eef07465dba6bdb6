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
  type TollgateOptions,
} from './services.js';
import type { Scenario } from './scenarios.js';
import { median } from './stats.js';
import { alternate, VERSUS_BREAK } from './versusRounds.js';
import type { AgainstBuild } from './versus.js';

/**
 * RLQS against classic checks: what tollgate's process spends serving Envoy's Rate Limit Quota
 * Service (`StreamRateLimitQuotas`, docs/rlqs.md) per 1,000 client requests, beside what it spends
 * per 1,000 `ShouldRateLimit` checks, on one tollgate, the same rules and the same Redis, in
 * rounds that alternate the two. The RLQS clients are the tests' fleet simulator
 * (test/rlqs/sim): each plays one Envoy's rate_limit_quota filter, decides its own requests from
 * tollgate's assignments and reports its buckets every reporting interval, so tollgate's work
 * follows the reports, not the requests. Its client requests are the admitted and denied totals
 * the simulator reports. The classic side is ghz at a constant rate. CPU is the tollgate
 * process's (and Redis's) utime + stime from /proc over each run. With `--against`, another
 * revision's tollgate runs every round beside this tree's, to show what a change costs.
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
  /**
   * RLQS only: ms of tollgate's CPU per 1,000 client requests after the fleet's join (from
   * JOIN_SECONDS into the run), the requests taken in proportion to the time, as the clients'
   * demand is even: what a fleet that stays costs, its streams' opening and settling left out.
   */
  settledServiceMsPer1000?: number;
}

export interface RlqsSideSummary {
  side: 'rlqs' | 'classic';
  /** Medians over the rounds. */
  serviceMsPer1000: number;
  /** RLQS only: after the join (RlqsRun.settledServiceMsPer1000); null for classic checks. */
  settledServiceMsPer1000: number | null;
  redisMsPer1000: number | null;
  requestsPerSecond: number;
}

/** One tollgate's figures: the working tree's, or with `--against` the other revision's. */
export interface RlqsTollgate {
  service: { name: string; title: string; settings: Record<string, string>; node?: string };
  runs: RlqsRun[];
  rlqs: RlqsSideSummary;
  classic: RlqsSideSummary;
  /** RLQS's service CPU per 1,000 requests over the classic's; null when either is missing. */
  ratio: number | null;
  /** tollgate's CPU with no load, in ms per second (timers, health, the rules poll). */
  idleMsPerSecond: number;
}

/** This tree's figure over the other revision's: under 1, this tree spends less. */
export interface RlqsChange {
  serviceMsPer1000: number | null;
  settledServiceMsPer1000: number | null;
  redisMsPer1000: number | null;
}

/** `--against`: another revision of tollgate, measured in the same rounds (against.ts). */
export interface RlqsAgainst extends RlqsTollgate {
  /** The revision as the command line named it, and its commit. */
  ref: string;
  sha: string;
  /** This tree's CPU per 1,000 requests over the other revision's, per side. */
  treeOverAgainst: { rlqs: RlqsChange; classic: RlqsChange };
  /**
   * The same, round by round (`pairedRatios`): each round's run on this tree over the other's
   * run of the same side in that round, in the rounds' order, and their median.
   */
  roundByRound: { rlqs: PairedRatios; settled: PairedRatios; classic: PairedRatios };
}

/** Ratios of paired runs, in the rounds' order, and their median (null without a pair). */
export interface PairedRatios {
  ratios: number[];
  median: number | null;
}

/**
 * This tree's figure over the other revision's, paired round by round: the two run one after the
 * other in each round, so a round's ratio sees the same load on the machine, which drifts more
 * between rounds than within one.
 */
export function pairedRatios(
  mine: readonly RlqsRun[],
  theirs: readonly RlqsRun[],
  side: RlqsRun['side'],
  figure: (run: RlqsRun) => number | null | undefined,
): PairedRatios {
  const ratios = mine.flatMap((run) => {
    const other = theirs.find((each) => each.side === side && each.round === run.round);
    if (run.side !== side || other === undefined) return [];
    const ratio = ratioOf(figure(run) ?? null, figure(other) ?? null);
    return ratio === null ? [] : [ratio];
  });
  return { ratios, median: ratios.length > 0 ? median(ratios) : null };
}

export interface RlqsResults extends RlqsTollgate {
  plan: RlqsPlan;
  against?: RlqsAgainst;
}

/**
 * Each RLQS run opens its fleet's streams afresh: their first assignments, and the changes while
 * the shares settle, come in its first seconds (143 of 146 changes in the first 5 s of a 20 s
 * run), each followed by a report. The CPU after this is what a fleet that stays costs.
 */
const JOIN_SECONDS = 5;

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
  let joined: { cpu: number; atMs: number } | undefined;
  const started = performance.now();
  const join = setTimeout(() => {
    joined = { cpu: treeCpuSeconds(service.pid), atMs: performance.now() };
  }, JOIN_SECONDS * 1000);
  const result = await simulate(binary, scenarioOf(service.address, plan, plan.seconds, round));
  clearTimeout(join);
  const after = cpuOf(service, redis);
  const endedAt = performance.now();
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
      ...(joined === undefined
        ? {}
        : {
            settledServiceMsPer1000: perThousand(
              after.service - joined.cpu,
              ((admitted + denied) * (endedAt - joined.atMs)) / (endedAt - started),
            ),
          }),
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
  const settled = mine
    .map((run) => run.settledServiceMsPer1000)
    .filter((v): v is number => v !== undefined);
  return {
    side,
    serviceMsPer1000: mine.length ? median(mine.map((run) => run.serviceMsPer1000)) : NaN,
    settledServiceMsPer1000: settled.length ? median(settled) : null,
    redisMsPer1000: redis.length ? median(redis) : null,
    requestsPerSecond: mine.length ? median(mine.map((run) => run.requests / run.seconds)) : NaN,
  };
}

export interface RlqsOptions {
  /** Settings beside the row's own (`--env`). */
  extraEnv?: Record<string, string>;
  node?: NodeRuntime;
  /** `--against`: another revision's tollgate, beside this tree's in the same rounds. */
  against?: AgainstBuild;
}

/** One tollgate of the row, and its runs as they come. */
interface Contender {
  service: Service;
  title: string;
  runs: RlqsRun[];
}

/**
 * The row's tollgate, from the checkout at `root`. With `--against` each of the two counts under a
 * CACHE_KEY_PREFIX of its own, so that neither spends the other's counters or demand pools.
 */
function startRlqsTollgate(
  redis: RedisServer,
  root: string,
  name: TollgateOptions['name'],
  plan: RlqsPlan,
  options: RlqsOptions,
  keyPrefix?: string,
): Promise<Service> {
  const prefix: Record<string, string> =
    keyPrefix === undefined
      ? {}
      : { CACHE_KEY_PREFIX: `${options.extraEnv?.CACHE_KEY_PREFIX ?? ''}${keyPrefix}` };
  return startTollgate({
    repoRoot: root,
    name,
    redisUrl: redis.url,
    workers: 1,
    rules: { yaml: rlqsRulesYaml(plan.limitPerMinute), ready: READY },
    // Fixed windows, as the comparison's tollgate-fixed, but the bench's generous REDIS_TIMEOUT
    // (100ms) rather than tollgate's 15ms: on two shared cores a check past 15 ms fails, and this
    // row measures CPU, not the tail.
    env: { DEFAULT_ALGORITHM: 'fixed_window', ...options.extraEnv, ...prefix },
    node: options.node ?? BENCH_NODE,
  });
}

/** The tollgates of the row: this tree's, then with `--against` the other revision's. */
async function startContenders(
  redis: RedisServer,
  repoRoot: string,
  plan: RlqsPlan,
  options: RlqsOptions,
  started: Contender[],
): Promise<void> {
  const { against } = options;
  const title = 'fixed windows, RLQS and ShouldRateLimit on one process';
  started.push({
    service: await startRlqsTollgate(
      redis,
      repoRoot,
      'tollgate-rlqs',
      plan,
      options,
      against && 'this:',
    ),
    title: `tollgate, ${title}`,
    runs: [],
  });
  if (against === undefined) return;
  started.push({
    service: await startRlqsTollgate(redis, against.root, against.name, plan, options, 'that:'),
    title: `tollgate at ${against.ref} (${against.sha.slice(0, 12)}), ${title}`,
    runs: [],
  });
}

async function warmUp(ghz: Ghz, binary: string, service: Service, plan: RlqsPlan): Promise<void> {
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
}

/** Each tollgate's CPU over the same seconds with no load, in ms per second. */
async function idleCpu(services: Service[], seconds: number): Promise<number[]> {
  const before = services.map((service) => treeCpuSeconds(service.pid));
  const started = performance.now();
  await new Promise((resolve) => setTimeout(resolve, seconds * 1000));
  const after = services.map((service) => treeCpuSeconds(service.pid));
  const elapsedMs = performance.now() - started;
  return services.map((_, at) => ((after[at]! - before[at]!) * 1e6) / elapsedMs);
}

/**
 * Each side once per round, the sides alternating; with two tollgates each side runs on both in
 * turn, the first of the two changing every round, so that neither always follows the same run.
 */
async function runRounds(
  ghz: Ghz,
  binary: string,
  redis: RedisServer,
  plan: RlqsPlan,
  contenders: Contender[],
): Promise<void> {
  for (const { round, item: side } of alternate(['classic', 'rlqs'] as const, plan.rounds)) {
    const turn = round % 2 === 1 ? contenders : [...contenders].reverse();
    for (const { service, runs } of turn) {
      const on = contenders.length > 1 ? ` on ${service.name}` : '';
      log(`rlqs, round ${round}/${plan.rounds}: ${side}${on}, ${plan.seconds} s`);
      runs.push(
        side === 'rlqs'
          ? await rlqsRound(binary, service, redis, plan, round)
          : await classicRound(ghz, service, redis, plan, round),
      );
    }
  }
}

/** One tollgate's medians and ratio, logged. */
function figuresOf(contender: Contender, idleMsPerSecond: number, who: string): RlqsTollgate {
  const { service, runs } = contender;
  const rlqs = summarize('rlqs', runs);
  const classic = summarize('classic', runs);
  const ratio =
    Number.isFinite(rlqs.serviceMsPer1000) && classic.serviceMsPer1000 > 0
      ? rlqs.serviceMsPer1000 / classic.serviceMsPer1000
      : null;
  log(
    `rlqs: ${who} spent ${rlqs.serviceMsPer1000.toFixed(1)} ms of CPU per 1,000 RLQS client requests ` +
      `and ${classic.serviceMsPer1000.toFixed(1)} ms per 1,000 classic checks (${ratio?.toFixed(3) ?? 'n/a'}×)`,
  );
  return {
    service: {
      name: service.name,
      title: contender.title,
      settings: service.settings,
      ...(service.node ? { node: service.node } : {}),
    },
    runs,
    rlqs,
    classic,
    ratio,
    idleMsPerSecond,
  };
}

/** `mine / theirs`, or null when either is missing. */
export function ratioOf(mine: number | null, theirs: number | null): number | null {
  return mine !== null && theirs !== null && Number.isFinite(mine) && theirs > 0
    ? mine / theirs
    : null;
}

function changeOf(mine: RlqsSideSummary, theirs: RlqsSideSummary): RlqsChange {
  return {
    serviceMsPer1000: ratioOf(mine.serviceMsPer1000, theirs.serviceMsPer1000),
    settledServiceMsPer1000: ratioOf(mine.settledServiceMsPer1000, theirs.settledServiceMsPer1000),
    redisMsPer1000: ratioOf(mine.redisMsPer1000, theirs.redisMsPer1000),
  };
}

function againstOf(build: AgainstBuild, tree: RlqsTollgate, theirs: RlqsTollgate): RlqsAgainst {
  const treeOverAgainst = {
    rlqs: changeOf(tree.rlqs, theirs.rlqs),
    classic: changeOf(tree.classic, theirs.classic),
  };
  const times = (value: number | null) => (value === null ? 'n/a' : `${value.toFixed(3)}×`);
  log(
    `rlqs: this tree over ${build.ref}, tollgate CPU per 1,000 requests: ` +
      `RLQS ${times(treeOverAgainst.rlqs.serviceMsPer1000)} (after the join ${times(treeOverAgainst.rlqs.settledServiceMsPer1000)}), classic ${times(treeOverAgainst.classic.serviceMsPer1000)}`,
  );
  const roundByRound = {
    rlqs: pairedRatios(tree.runs, theirs.runs, 'rlqs', (run) => run.serviceMsPer1000),
    settled: pairedRatios(tree.runs, theirs.runs, 'rlqs', (run) => run.settledServiceMsPer1000),
    classic: pairedRatios(tree.runs, theirs.runs, 'classic', (run) => run.serviceMsPer1000),
  };
  log(
    `rlqs: round by round, the median: RLQS ${times(roundByRound.rlqs.median)} ` +
      `(after the join ${times(roundByRound.settled.median)}), classic ${times(roundByRound.classic.median)}`,
  );
  return { ref: build.ref, sha: build.sha, ...theirs, treeOverAgainst, roundByRound };
}

export async function runRlqs(
  ghz: Ghz,
  redis: RedisServer,
  repoRoot: string,
  plan: RlqsPlan,
  options: RlqsOptions = {},
): Promise<RlqsResults> {
  const binary = simulatorBinary(repoRoot);
  const contenders: Contender[] = [];
  try {
    await startContenders(redis, repoRoot, plan, options, contenders);
    for (const { service } of contenders) {
      const of = contenders.length > 1 ? ` of ${service.name}` : '';
      log(`rlqs: warm-up${of}, ${plan.warmupSeconds} s of each side`);
      await warmUp(ghz, binary, service, plan);
    }
    log(`rlqs: ${plan.idleSeconds} s with no load`);
    const idle = await idleCpu(
      contenders.map(({ service }) => service),
      plan.idleSeconds,
    );
    await runRounds(ghz, binary, redis, plan, contenders);
    const tree = figuresOf(contenders[0]!, idle[0]!, 'tollgate');
    const { against } = options;
    if (against === undefined) return { plan, ...tree };
    const theirs = figuresOf(contenders[1]!, idle[1]!, against.name);
    return { plan, ...tree, against: againstOf(against, tree, theirs) };
  } finally {
    for (const { service } of contenders) await service.stop?.();
  }
}

/** What is missing or wrong in one tollgate's figures, named from `at` (rlqs, rlqs.against). */
function tollgateProblems(figures: RlqsTollgate, at: string): string[] {
  const problems: string[] = [];
  for (const side of ['rlqs', 'classic'] as const) {
    const runs = figures.runs.filter((run) => run.side === side);
    if (runs.length === 0) problems.push(`${at}.${side}: not run`);
    for (const run of runs) {
      const where = `${at}.${side}[${run.round}]`;
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
  if (figures.ratio === null) problems.push(`${at}.ratio: missing`);
  if (!Number.isFinite(figures.idleMsPerSecond)) problems.push(`${at}.idleMsPerSecond: missing`);
  return problems;
}

/** What is missing or wrong in the row, for missingFields and the `--rlqs` run. */
export function rlqsProblems(results: RlqsResults): string[] {
  return [
    ...tollgateProblems(results, 'rlqs'),
    ...(results.against ? tollgateProblems(results.against, 'rlqs.against') : []),
  ];
}
