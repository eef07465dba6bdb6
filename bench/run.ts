import { execFileSync } from 'node:child_process';
import { mkdirSync, mkdtempSync, renameSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { parseArgs } from 'node:util';
import { checkAdmission } from './admission.js';
import { latencyChart } from './chart.js';
import { killAllNow, stopAll } from './children.js';
import { createGhz } from './ghz.js';
import { describeMachine, finishMachine } from './machine.js';
import { measure, type Measured } from './measure.js';
import { BREAK, makePlan } from './plan.js';
import { markdownReport, rlqsBoundReport, rlqsReport, versusReport } from './report.js';
import { runMemory } from './memory.js';
import { readProfile, summarizeProfile } from './profile.js';
import { HEADLINE, SCENARIOS } from './scenarios.js';
import { judgeTargets, missingFields, versusTargets, type BenchResults } from './results.js';
import { log, runLatency, runScenarios, runThroughput } from './series.js';
import {
  startBare,
  startRedis,
  startReference,
  startTollgate,
  type RedisServer,
} from './services.js';
import { VERSUS_READY, VERSUS_RULES_YAML, VERSUS_SCENARIOS } from './versusScenarios.js';
import { assertPerf, runPerf, type PerfEntry } from './perf.js';
import { rlqsProblems, runRlqs } from './rlqs.js';
import { rlqsAgainstSection } from './rlqsAgainstReport.js';
import { rlqsBoundMisses, rlqsBoundProblems, runRlqsBound } from './rlqsBound.js';
import { runScriptCost } from './scriptCost.js';
import { runScriptInstructions } from './scriptInstructions.js';
import { instructionReport } from './scriptInstructionsReport.js';
import { runVariants } from './variants.js';
import { runVersus, type AgainstBuild } from './versus.js';
import { buildAgainst, parseAgainstRef } from './against.js';
import { installNode, parseNodeVersion } from './runtime.js';
import { BENCH_NODE, type NodeRuntime } from './services.js';

/**
 * The bench, run by `npm run bench` (scripts/bench.mjs builds it and ghz first). Usage:
 *   npm run bench [-- --quick] [--out NAME] [--workers N] [--node VERSION]
 * Writes bench/results/NAME.{json,md,svg}; NAME defaults to latest-full or latest-quick. Every
 * --quick run writes into .cache/bench-results/ instead, leaving the tracked results alone.
 * `--node VERSION` runs the tollgates and the bare servers on that Node line (runtime.ts).
 *   npm run bench -- --versus [--quick] [--out NAME] [--env NAME=VALUE] [--against GIT_REF] [--node VERSION]
 *     [--tail-diagnostics]
 * Writes bench/results/NAME.{md,json}: only the comparison with envoyproxy/ratelimit (versus.ts);
 * `--against` adds another revision of tollgate as one more service (against.ts);
 * `--tail-diagnostics` reports the judged tollgate's event loop and GC per tier (tailDiagnostics.ts).
 *   npm run bench -- --rlqs [--quick] [--out NAME] [--env NAME=VALUE] [--against GIT_REF] [--rounds N] [--node VERSION]
 * Writes bench/results/NAME.{md,json} (rlqs-MODE by default): only tollgate's CPU per 1,000
 * requests under RLQS against classic checks (rlqs.ts); `--against` runs the same rounds on
 * another revision's tollgate too, and reports both and this tree's over the other's.
 *   npm run bench -- --rlqs-bound [--quick] [--out NAME] [--env NAME=VALUE] [--node VERSION]
 * Writes bench/results/NAME.{md,json} (rlqs-bound by default, rlqs-bound-quick with --quick):
 * only RLQS's over-admission bound over long runs (rlqsBound.ts).
 *   npm run bench -- --profile [--scenario NAME] [--rps N] [--env NAME=VALUE]
 * Writes bench/results/profile-SCENARIO[-N]rps.{md,json}: where tollgate's CPU goes (see profileRun).
 *   npm run bench -- --perf [--scenario NAME] [--rps N]
 * Writes bench/results/perf-SCENARIO.{md,json}: Linux perf on the reference, tollgate and Redis.
 *   npm run bench -- --script-cost --instructions [--quick]
 * Writes bench/results/script-cost.{md,json}: the instructions a script call costs Redis, counted
 * by callgrind (see scriptInstructionsRun).
 *   npm run bench -- --script-cost [--quick]
 * Writes bench/results/script-cost-timings.{md,json}: the same calls timed (see scriptCostRun).
 */
const benchDir = dirname(fileURLToPath(import.meta.url));
// Compiled to .cache/bench/bench/: the repository is three levels up.
const repoRoot = join(benchDir, '..', '..', '..');

const { values } = parseArgs({
  options: {
    quick: { type: 'boolean', default: false },
    out: { type: 'string' },
    workers: { type: 'string', default: '1' },
    profile: { type: 'boolean', default: false },
    versus: { type: 'boolean', default: false },
    rlqs: { type: 'boolean', default: false },
    'rlqs-bound': { type: 'boolean', default: false },
    'script-cost': { type: 'boolean', default: false },
    instructions: { type: 'boolean', default: false },
    perf: { type: 'boolean', default: false },
    env: { type: 'string', multiple: true, default: [] },
    node: { type: 'string' },
    against: { type: 'string' },
    'tail-diagnostics': { type: 'boolean', default: false },
    scenario: { type: 'string' },
    rps: { type: 'string' },
    rounds: { type: 'string' },
  },
});
const plan = makePlan(values.quick ? 'quick' : 'full');
const name = values.out ?? `latest-${plan.mode}`;
const workers = Number(values.workers);
if (!/^[\w.-]+$/.test(name)) throw new Error(`--out: '${name}' is not a plain file name`);
if (!Number.isInteger(workers) || workers < 1) throw new Error('--workers: a whole number ≥ 1');
const ghzBinary = process.env.BENCH_GHZ;
if (!ghzBinary) throw new Error('BENCH_GHZ is unset: run the bench with npm run bench');

if (values.instructions && !values['script-cost']) {
  throw new Error('--instructions: only with --script-cost');
}
if (values.against !== undefined && !values.versus && !values.rlqs) {
  throw new Error('--against: only with --versus or --rlqs');
}
if (values.rounds !== undefined) {
  const rounds = Number(values.rounds);
  if (!values.rlqs) throw new Error('--rounds: only with --rlqs');
  if (!Number.isInteger(rounds) || rounds < 1) throw new Error('--rounds: a whole number ≥ 1');
  plan.rlqs.rounds = rounds;
}
if (values['tail-diagnostics'] && !values.versus) {
  throw new Error('--tail-diagnostics: only with --versus');
}
const againstRef = values.against === undefined ? undefined : parseAgainstRef(values.against);
// Installed before anything starts, so that a failed install costs no measurement.
const node: NodeRuntime =
  values.node === undefined ? BENCH_NODE : installNode(repoRoot, parseNodeVersion(values.node));
const against: AgainstBuild | undefined =
  againstRef === undefined ? undefined : buildAgainst(repoRoot, againstRef);

process.on('exit', killAllNow);
for (const signal of ['SIGINT', 'SIGTERM'] as const) {
  process.once(signal, () => {
    log(`${signal}: stopping every process the bench started`);
    void stopAll(1_000).then(() => process.exit(130));
  });
}

/**
 * `--env NAME=VALUE` (repeatable): settings for the tollgates of `--versus` and `--rlqs`, to try
 * a lever.
 */
function tollgateEnv(): Record<string, string> {
  const env: Record<string, string> = {};
  for (const pair of values.env ?? []) {
    const at = pair.indexOf('=');
    if (at <= 0) throw new Error(`--env: '${pair}' is not NAME=VALUE`);
    env[pair.slice(0, at)] = pair.slice(at + 1);
  }
  return env;
}

/**
 * Full runs write into bench/results/, which is kept in the repository; quick runs, which check
 * that the bench works rather than measure, into .cache/bench-results/, so they leave the
 * checkout as it was.
 */
const resultsDir =
  plan.mode === 'quick' ? join('.cache', 'bench-results') : join('bench', 'results');

/** Writes bench results NAME.EXT for each extension given, each file whole, and says so. */
function writeResults(name: string, files: Record<string, string>): void {
  mkdirSync(join(repoRoot, resultsDir), { recursive: true });
  for (const [extension, text] of Object.entries(files)) {
    const path = join(repoRoot, resultsDir, `${name}.${extension}`);
    writeFileSync(`${path}.tmp`, text);
    renameSync(`${path}.tmp`, path);
  }
  log(`wrote ${join(resultsDir, name)}.{${Object.keys(files).join(',')}}`);
}

async function main(): Promise<number> {
  const started = Date.now();
  const ghz = createGhz(ghzBinary!, repoRoot);
  const machine = describeMachine(process.env.BENCH_GHZ_VERSION ?? 'unknown');
  let redis: RedisServer | undefined;
  try {
    log(`${plan.mode} run, results in ${join(resultsDir, name)}.*`);
    if (machine.loadAverage.start > machine.cores / 2) {
      // Other work competes with ghz and the services for the same cores: say so up front.
      log(`the machine is busy (load average ${machine.loadAverage.start}): expect low numbers`);
    }
    redis = await startRedis();
    // First, on a fresh Redis: tollgate against envoyproxy/ratelimit, which operators ask first.
    const versus = await runVersus(ghz, redis, repoRoot, benchDir, plan.versus, {
      node,
      admission: plan.admission,
    });
    const rlqs = await runRlqs(ghz, redis, repoRoot, plan.rlqs, { node });
    const rlqsBound = await runRlqsBound(redis, repoRoot, plan.rlqsBound, { node });
    const bare = await startBare(benchDir, 'grpc-js', node);
    const withRedis = await startTollgate({
      repoRoot,
      name: 'redis',
      redisUrl: redis.url,
      workers,
      node,
    });
    const inMemory = await startTollgate({ repoRoot, name: 'memory', workers: 1, node });
    const everyService: Measured[] = [
      { service: bare },
      { service: withRedis, redis },
      { service: inMemory },
    ];
    const tollgates = everyService.slice(1);

    const throughput = await runThroughput(ghz, everyService, plan.throughput);
    const latency = await runLatency(ghz, everyService, plan.latency);
    const scenarios = await runScenarios(ghz, tollgates, plan);
    const admission = [];
    for (const { service } of tollgates) {
      log(`over-admission check: ${service.name}`);
      admission.push(await checkAdmission(service, ghz, plan.admission));
    }

    const variants = await runVariants(
      ghz,
      bare,
      redis,
      repoRoot,
      {
        ...plan.variants,
        concurrency: plan.throughput.concurrency,
        connections: plan.throughput.connections,
      },
      node,
    );
    const memory = [];
    for (const target of tollgates) {
      log(`memory: ${target.service.name}, ${plan.memory.seconds} s at ${plan.memory.rps} req/s`);
      memory.push(await runMemory(ghz, target, plan.memory));
    }

    const partial = {
      name,
      mode: plan.mode,
      command: process.env.BENCH_COMMAND ?? `npm run bench -- ${process.argv.slice(2).join(' ')}`,
      startedAt: new Date(started).toISOString(),
      durationSeconds: (Date.now() - started) / 1000,
      machine: finishMachine(machine),
      plan,
      breakCriteria: BREAK,
      services: everyService.map(({ service }) => ({
        name: service.name,
        title: service.title,
        settings: service.settings,
        ...(service.node ? { node: service.node } : {}),
      })),
      throughput,
      latency,
      scenarios,
      admission,
      variants,
      memory,
      versus,
      rlqs,
      rlqsBound,
    };
    const results: BenchResults = { ...partial, targets: judgeTargets(partial) };
    const chartTitle = `tollgate p99 latency, ${results.mode} run, ${machine.cores} cores`;
    writeResults(name, {
      json: `${JSON.stringify(results, null, 2)}\n`,
      svg: latencyChart(latency, chartTitle, BREAK.maxP99Ms),
      md: markdownReport(results, `${name}.svg`),
    });

    const problems = missingFields(results);
    for (const problem of problems) log(`missing or invalid: ${problem}`);
    const overAdmitted = admission.filter((check) => check.overAdmitted);
    for (const check of overAdmitted) {
      log(`OVER-ADMISSION on ${check.service}: ${check.allowed} allowed, limit ${check.limit}`);
    }
    return problems.length > 0 || overAdmitted.length > 0 ? 1 : 0;
  } finally {
    redis?.client.disconnect();
    await stopAll();
  }
}

/**
 * `--profile [--scenario NAME] [--rps N] [--env NAME=VALUE]`: tollgate on Redis under
 * `node --cpu-prof`, loaded closed-loop as in the throughput runs (or at N req/s, as in the
 * comparison's constant rates), then where its CPU went, into bench/results/profile-SCENARIO.md
 * (profile-SCENARIO-Nrps.md).
 */
async function profileRun(): Promise<number> {
  const scenario = SCENARIOS.find(
    (candidate) => candidate.name === (values.scenario ?? HEADLINE.name),
  );
  if (!scenario) throw new Error(`--scenario: one of ${SCENARIOS.map((s) => s.name).join(', ')}`);
  const rps = values.rps === undefined ? undefined : Number(values.rps);
  if (rps !== undefined && !(Number.isInteger(rps) && rps > 0))
    throw new Error('--rps: a whole number of requests per second');
  const ghz = createGhz(ghzBinary!, repoRoot);
  const machine = describeMachine(process.env.BENCH_GHZ_VERSION ?? 'unknown');
  const profileDir = mkdtempSync(join(tmpdir(), 'tollgate-profile-'));
  let redis: RedisServer | undefined;
  try {
    redis = await startRedis();
    const service = await startTollgate({
      repoRoot,
      name: 'redis',
      redisUrl: redis.url,
      workers: 1,
      nodeArgs: ['--cpu-prof', `--cpu-prof-dir=${profileDir}`],
      env: tollgateEnv(),
      node,
    });
    const load = {
      concurrency: plan.throughput.concurrency,
      connections: plan.throughput.connections,
      timeoutMs: 5_000,
      ...(rps === undefined ? {} : { rps }),
    };
    const how = rps === undefined ? 'closed loop' : `${rps} req/s`;
    log(`profiling ${scenario.name}: ${plan.throughput.seconds} s ${how} after a warm-up`);
    await ghz.run({
      ...load,
      seconds: plan.throughput.warmupSeconds,
      address: service.address,
      request: scenario.request,
    });
    const run = await measure(ghz, { service, redis }, scenario, {
      ...load,
      seconds: plan.throughput.seconds,
    });
    await service.stop?.();
    const summary = summarizeProfile(readProfile(profileDir));
    const percent = (value: number) => `${value.toFixed(1)}%`;
    const settings = Object.entries(tollgateEnv()).map(([key, value]) => `${key}=${value}`);
    const settingsNote = settings.length > 0 ? `, ${settings.join(' ')}` : '';
    const text = [
      `# Where tollgate's CPU goes: ${scenario.name}`,
      '',
      `\`${process.env.BENCH_COMMAND ?? 'npm run bench -- --profile'}\`, ${new Date().toISOString()}. ` +
        `tollgate on Redis (\`node --cpu-prof dist/main.js\`${settingsNote}), ghz ${how}: ${load.concurrency} concurrent calls on ${load.connections} connections, ` +
        `${plan.throughput.seconds} s after a ${plan.throughput.warmupSeconds} s warm-up (which the profile includes). ` +
        `${Math.round(run.achievedRps).toLocaleString('en-US')} req/s, ${run.redis?.scriptCallsPerRequest.toFixed(2) ?? 'n/a'} Redis calls per request. ` +
        `Machine: ${machine.cpuModel}, ${machine.cores} cores, load average ${machine.loadAverage.start.toFixed(2)} at the start.`,
      '',
      `Self time by owner, in % of the ${summary.busySeconds.toFixed(1)} s the process was busy:`,
      '',
      '| owner | share |',
      '| --- | --- |',
      ...summary.owners.map(({ owner, percent: p }) => `| ${owner} | ${percent(p)} |`),
      '',
      'The functions with the most self time:',
      '',
      '| function | share |',
      '| --- | --- |',
      ...summary.functions.map(({ name, percent: p }) => `| \`${name}\` | ${percent(p)} |`),
      '',
    ].join('\n');
    const file = `profile-${scenario.name}${rps === undefined ? '' : `-${rps}rps`}`;
    writeResults(file, {
      md: text,
      json: `${JSON.stringify({ scenario: scenario.name, run, summary }, null, 2)}\n`,
    });
    return 0;
  } finally {
    redis?.client.disconnect();
    await stopAll();
    rmSync(profileDir, { recursive: true, force: true });
  }
}

/**
 * `--versus [--quick] [--out NAME] [--env NAME=VALUE ...]`: only the side-by-side runs with
 * envoyproxy/ratelimit, into bench/results/NAME.{md,json} (default versus-MODE), to measure a
 * lever without the whole bench.
 */
async function versusRun(): Promise<number> {
  const started = Date.now();
  const ghz = createGhz(ghzBinary!, repoRoot);
  const machine = describeMachine(process.env.BENCH_GHZ_VERSION ?? 'unknown');
  let redis: RedisServer | undefined;
  try {
    redis = await startRedis();
    const versus = await runVersus(ghz, redis, repoRoot, benchDir, plan.versus, {
      extraEnv: tollgateEnv(),
      node,
      ...(against ? { against } : {}),
      admission: plan.admission,
      tailDiagnostics: values['tail-diagnostics'] ?? false,
    });
    const targets = versusTargets(versus);
    const results = {
      name: values.out ?? `versus-${plan.mode}`,
      mode: plan.mode,
      command: process.env.BENCH_COMMAND ?? 'npm run bench -- --versus',
      startedAt: new Date(started).toISOString(),
      durationSeconds: (Date.now() - started) / 1000,
      machine: finishMachine(machine),
      plan,
      versus,
      targets,
    };
    writeResults(results.name, {
      json: `${JSON.stringify(results, null, 2)}\n`,
      md: versusReport(results),
    });
    return 0;
  } finally {
    redis?.client.disconnect();
    await stopAll();
  }
}

/** What every results file starts with. */
type RunHeader = Pick<
  BenchResults,
  'name' | 'mode' | 'command' | 'startedAt' | 'durationSeconds' | 'machine'
>;

/**
 * One RLQS mode's run on a Redis of its own: `measure` runs it, and its results go to
 * bench/results/NAME.{md,json} under `key`, with the machine and the command. Resolves with the
 * run's problems (missing or invalid figures) and misses (a bound broken), both logged.
 */
async function rlqsModeRun<K extends string, R>(options: {
  name: string;
  command: string;
  key: K;
  plan: unknown;
  measure: (redis: RedisServer) => Promise<R>;
  report: (results: RunHeader & { [key in K]: R }) => string;
  problems: (measured: R) => string[];
  misses?: (measured: R) => string[];
}): Promise<number> {
  const started = Date.now();
  const machine = describeMachine(process.env.BENCH_GHZ_VERSION ?? 'unknown');
  let redis: RedisServer | undefined;
  try {
    redis = await startRedis();
    const measured = await options.measure(redis);
    const results = {
      name: values.out ?? options.name,
      mode: plan.mode,
      command: process.env.BENCH_COMMAND ?? options.command,
      startedAt: new Date(started).toISOString(),
      durationSeconds: (Date.now() - started) / 1000,
      machine: finishMachine(machine),
      plan: { mode: plan.mode, [options.key]: options.plan },
      [options.key]: measured,
    } as RunHeader & { [key in K]: R };
    writeResults(results.name, {
      json: `${JSON.stringify(results, null, 2)}\n`,
      md: options.report(results),
    });
    const problems = options.problems(measured);
    for (const problem of problems) log(`missing or invalid: ${problem}`);
    const misses = options.misses?.(measured) ?? [];
    for (const miss of misses) log(`OVER THE RLQS BOUND: ${miss}`);
    return problems.length > 0 || misses.length > 0 ? 1 : 0;
  } finally {
    redis?.client.disconnect();
    await stopAll();
  }
}

/**
 * `--rlqs [--quick] [--out NAME] [--env NAME=VALUE ...] [--against GIT_REF] [--rounds N]`: only
 * the RLQS row,
 * tollgate's CPU per 1,000 requests under RLQS streams against classic checks, into
 * bench/results/NAME.{md,json} (default rlqs-MODE). With `--against`, another revision's tollgate
 * runs the same rounds beside this tree's, and the report adds its figures and the ratios, round
 * by round too. `--rounds N`: that many rounds rather than the plan's 2.
 */
function rlqsRun(): Promise<number> {
  const ghz = createGhz(ghzBinary!, repoRoot);
  return rlqsModeRun({
    name: `rlqs-${plan.mode}`,
    command: 'npm run bench -- --rlqs',
    key: 'rlqs',
    plan: plan.rlqs,
    measure: (redis) =>
      runRlqs(ghz, redis, repoRoot, plan.rlqs, {
        extraEnv: tollgateEnv(),
        node,
        ...(against ? { against } : {}),
      }),
    // Without `--against` the section is empty and the report as it was.
    report: (results) => [rlqsReport(results), ...rlqsAgainstSection(results.rlqs)].join('\n'),
    problems: rlqsProblems,
  });
}

/**
 * `--rlqs-bound [--quick] [--out NAME] [--env NAME=VALUE ...]`: only RLQS's over-admission bound,
 * admitted requests per epoch-aligned window against the rule's limit over long runs, into
 * bench/results/NAME.{md,json} (default rlqs-bound, or rlqs-bound-quick). A full run that breaks
 * the bound exits 1; a quick one, on 2 s windows, only proves the mode works.
 */
function rlqsBoundRun(): Promise<number> {
  return rlqsModeRun({
    name: plan.mode === 'quick' ? 'rlqs-bound-quick' : 'rlqs-bound',
    command: 'npm run bench -- --rlqs-bound',
    key: 'rlqsBound',
    plan: plan.rlqsBound,
    measure: (redis) =>
      runRlqsBound(redis, repoRoot, plan.rlqsBound, { extraEnv: tollgateEnv(), node }),
    report: rlqsBoundReport,
    problems: rlqsBoundProblems,
    misses: (measured) => (plan.mode === 'full' ? rlqsBoundMisses(measured) : []),
  });
}

/**
 * `--script-cost [--quick]`: what one call of the decision script costs Redis, against scripts
 * that decide nothing (see bench/scriptCost.ts), into bench/results/script-cost-timings.{md,json}.
 * No ghz and no service: the numbers are Redis's own, on an idle Redis. On a shared machine they
 * are too noisy to split a script's cost into parts: `--instructions` counts instead.
 */
async function scriptCostRun(): Promise<number> {
  const machine = describeMachine(process.env.BENCH_GHZ_VERSION ?? 'unknown');
  const scriptPlan = {
    calls: plan.mode === 'quick' ? 2_000 : 20_000,
    rounds: plan.mode === 'quick' ? 1 : 5,
  };
  let redis: RedisServer | undefined;
  try {
    redis = await startRedis();
    log(`script cost: ${scriptPlan.rounds} rounds of ${scriptPlan.calls} calls per variant`);
    const rows = await runScriptCost(redis.client, scriptPlan);
    const text = [
      '# What a decision costs Redis itself',
      '',
      `\`${process.env.BENCH_COMMAND ?? 'npm run bench -- --script-cost'}\`, ${new Date().toISOString()}. ` +
        `Each variant called ${scriptPlan.calls.toLocaleString('en-US')} times in pipelines of 200 on an idle Redis, over 50 tenants, ` +
        `in ${scriptPlan.rounds} rounds that alternate the variants; Redis's own \`usec_per_call\` for EVALSHA, ` +
        'inner commands included, from INFO commandstats: the time Redis spends executing the call, without reading it or answering it. ' +
        `Machine: ${machine.cpuModel}, ${machine.cores} cores, load average ${machine.loadAverage.start.toFixed(2)} at the start.`,
      '',
      '| script | counters | µs per call (median) | rounds |',
      '| --- | --- | --- | --- |',
      ...rows.map(
        (row) =>
          `| ${row.variant} | ${row.counters} | ${row.medianUs.toFixed(2)} | ${row.rounds.map((us) => us.toFixed(2)).join(', ')} |`,
      ),
      '',
    ].join('\n');
    writeResults('script-cost-timings', {
      md: text,
      json: `${JSON.stringify({ plan: scriptPlan, rows }, null, 2)}\n`,
    });
    return 0;
  } finally {
    redis?.client.disconnect();
    await stopAll();
  }
}

/**
 * `--script-cost --instructions [--quick]`: the instructions Redis executes per script call,
 * counted by callgrind (see bench/scriptInstructions.ts), into bench/results/script-cost.{md,json}.
 * Deterministic, so one pass; --quick counts fewer calls, only to prove the mode works.
 */
async function scriptInstructionsRun(): Promise<number> {
  const machine = describeMachine(process.env.BENCH_GHZ_VERSION ?? 'unknown');
  const counting =
    plan.mode === 'quick' ? { warmUp: 50, measured: 100 } : { warmUp: 200, measured: 500 };
  const started = Date.now();
  const rows = await runScriptInstructions(counting, log);
  const version = (command: string, args: string[]) =>
    execFileSync(command, args, { encoding: 'utf8' }).trim();
  const text = instructionReport(rows, counting, {
    command: process.env.BENCH_COMMAND ?? 'npm run bench -- --script-cost --instructions',
    date: new Date().toISOString(),
    redis: `Redis ${/v=([\d.]+)/.exec(version('redis-server', ['--version']))?.[1] ?? '?'}`,
    valgrind: version('valgrind', ['--version']),
    machine: `${machine.cpuModel}, ${machine.cores} cores, load average ${machine.loadAverage.start.toFixed(2)} at the start, ${((Date.now() - started) / 1_000).toFixed(0)} s`,
  });
  writeResults('script-cost', {
    md: text,
    json: `${JSON.stringify({ plan: counting, rows }, null, 2)}\n`,
  });
  return 0;
}

/**
 * `--perf [--scenario NAME] [--rps N]`: the reference and tollgate with fixed windows on the
 * comparison's rules, each loaded at N req/s (3,000 by default) while Linux perf watches it, then
 * Redis (see bench/perf.ts), into bench/results/perf-SCENARIO.{md,json}.
 */
async function perfRun(): Promise<number> {
  assertPerf();
  const scenario = VERSUS_SCENARIOS.find(
    (candidate) => candidate.name === (values.scenario ?? 'one-descriptor'),
  );
  if (!scenario)
    throw new Error(`--scenario: one of ${VERSUS_SCENARIOS.map((s) => s.name).join(', ')}`);
  const rps = Number(values.rps ?? '3000');
  if (!(Number.isInteger(rps) && rps > 0)) throw new Error('--rps: a whole number');
  const ghz = createGhz(ghzBinary!, repoRoot);
  const machine = describeMachine(process.env.BENCH_GHZ_VERSION ?? 'unknown');
  let redis: RedisServer | undefined;
  try {
    redis = await startRedis();
    const services = [
      await startReference(repoRoot, redis),
      await startTollgate({
        repoRoot,
        name: 'tollgate-fixed',
        redisUrl: redis.url,
        workers: 1,
        rules: { yaml: VERSUS_RULES_YAML, ready: VERSUS_READY },
        env: { DEFAULT_ALGORITHM: 'fixed_window', REDIS_TIMEOUT: '15ms', ...tollgateEnv() },
        node,
      }),
    ];
    const seconds = plan.mode === 'quick' ? 2 : 8;
    const entries = await runPerf(ghz, redis, services, scenario, { rps, seconds });
    const text = perfReport(entries, scenario.name, rps, seconds, machine);
    writeResults(`perf-${scenario.name}`, {
      md: text,
      json: `${JSON.stringify({ scenario: scenario.name, rps, seconds, entries }, null, 2)}\n`,
    });
    return 0;
  } finally {
    redis?.client.disconnect();
    await stopAll();
  }
}

function perfReport(
  entries: PerfEntry[],
  scenario: string,
  rps: number,
  seconds: number,
  machine: ReturnType<typeof describeMachine>,
): string {
  const lines = [
    `# Where the CPU goes, kernel included: ${scenario}`,
    '',
    `\`${process.env.BENCH_COMMAND ?? 'npm run bench -- --perf'}\`, ${new Date().toISOString()}. ` +
      `Each service on the comparison's rules and its own Redis call pattern, at ${rps} req/s from ghz ` +
      `(50 concurrent calls on 4 connections); \`perf stat\` and \`perf record -F 999 -g\` watch it for ${seconds} s, ` +
      'then watch Redis for as long under the same load. CPU per request is task-clock over the requests sent while perf watched. ' +
      "tollgate runs with fixed windows (the reference's semantics) and its default REDIS_TIMEOUT. " +
      `Machine: ${machine.cpuModel}, ${machine.cores} cores, load average ${machine.loadAverage.start.toFixed(2)} at the start.`,
    '',
    '| service | process | CPU µs/request | context switches/request | where (share of samples) |',
    '| --- | --- | --- | --- | --- |',
  ];
  for (const entry of entries) {
    for (const side of entry.sides) {
      const where = side.objects.map((o) => `${o.name} ${o.percent.toFixed(1)}%`).join(', ');
      lines.push(
        `| ${entry.service} | ${side.process} | ${side.cpuUs.toFixed(0)} | ${side.contextSwitchesPerRequest.toFixed(2)} | ${where} |`,
      );
    }
  }
  for (const entry of entries) {
    for (const side of entry.sides) {
      lines.push(
        '',
        `## ${entry.service}: ${side.process === 'redis' ? 'Redis' : 'the service'}, the symbols with the most samples`,
        '',
        '| symbol | share |',
        '| --- | --- |',
        ...side.symbols.map(
          (s) => `| \`${s.name.replace(/\|/g, '\\|')}\` | ${s.percent.toFixed(1)}% |`,
        ),
      );
    }
  }
  return `${lines.join('\n')}\n`;
}

process.exitCode = values.profile
  ? await profileRun()
  : values.versus
    ? await versusRun()
    : values.rlqs
      ? await rlqsRun()
      : values['rlqs-bound']
        ? await rlqsBoundRun()
        : values['script-cost']
          ? values.instructions
            ? await scriptInstructionsRun()
            : await scriptCostRun()
          : values.perf
            ? await perfRun()
            : await main();
