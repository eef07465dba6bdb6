import { renameSync, writeFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { parseArgs } from 'node:util';
import { checkAdmission } from './admission.js';
import { latencyChart } from './chart.js';
import { killAllNow, stopAll } from './children.js';
import { createGhz } from './ghz.js';
import { describeMachine, finishMachine } from './machine.js';
import type { Measured } from './measure.js';
import { BREAK, makePlan } from './plan.js';
import { markdownReport } from './report.js';
import { runMemory } from './memory.js';
import { judgeTargets, missingFields, type BenchResults } from './results.js';
import { log, runLatency, runScenarios, runThroughput } from './series.js';
import { startBare, startRedis, startTollgate, type RedisServer } from './services.js';
import { runVariants } from './variants.js';

/**
 * The bench, run by `npm run bench` (scripts/bench.mjs builds it and ghz first). Usage:
 *   npm run bench [-- --quick] [--out NAME] [--workers N]
 * Writes bench/results/NAME.{json,md,svg}; NAME defaults to latest-full or latest-quick.
 */
const benchDir = dirname(fileURLToPath(import.meta.url));
// Compiled to .cache/bench/bench/: the repository is three levels up.
const repoRoot = join(benchDir, '..', '..', '..');

const { values } = parseArgs({
  options: {
    quick: { type: 'boolean', default: false },
    out: { type: 'string' },
    workers: { type: 'string', default: '1' },
  },
});
const plan = makePlan(values.quick ? 'quick' : 'full');
const name = values.out ?? `latest-${plan.mode}`;
const workers = Number(values.workers);
if (!/^[\w.-]+$/.test(name)) throw new Error(`--out: '${name}' is not a plain file name`);
if (!Number.isInteger(workers) || workers < 1) throw new Error('--workers: a whole number ≥ 1');
const ghzBinary = process.env.BENCH_GHZ;
if (!ghzBinary) throw new Error('BENCH_GHZ is unset: run the bench with npm run bench');

process.on('exit', killAllNow);
for (const signal of ['SIGINT', 'SIGTERM'] as const) {
  process.once(signal, () => {
    log(`${signal}: stopping every process the bench started`);
    void stopAll(1_000).then(() => process.exit(130));
  });
}

function writeAtomically(path: string, text: string): void {
  writeFileSync(`${path}.tmp`, text);
  renameSync(`${path}.tmp`, path);
}

async function main(): Promise<number> {
  const started = Date.now();
  const ghz = createGhz(ghzBinary!, repoRoot);
  const machine = describeMachine(process.env.BENCH_GHZ_VERSION ?? 'unknown');
  let redis: RedisServer | undefined;
  try {
    log(`${plan.mode} run, results in bench/results/${name}.*`);
    if (machine.loadAverage.start > machine.cores / 2) {
      // Other work competes with ghz and the services for the same cores: say so up front.
      log(`the machine is busy (load average ${machine.loadAverage.start}): expect low numbers`);
    }
    redis = await startRedis();
    const bare = await startBare(benchDir);
    const withRedis = await startTollgate({
      repoRoot,
      name: 'redis',
      redisUrl: redis.url,
      workers,
    });
    const inMemory = await startTollgate({ repoRoot, name: 'memory', workers: 1 });
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

    const variants = await runVariants(ghz, bare, redis, repoRoot, {
      ...plan.variants,
      concurrency: plan.throughput.concurrency,
      connections: plan.throughput.connections,
    });
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
      })),
      throughput,
      latency,
      scenarios,
      admission,
      variants,
      memory,
    };
    const results: BenchResults = { ...partial, targets: judgeTargets(partial) };
    const base = join(repoRoot, 'bench', 'results', name);
    const chartTitle = `tollgate p99 latency, ${results.mode} run, ${machine.cores} cores`;
    writeAtomically(`${base}.json`, `${JSON.stringify(results, null, 2)}\n`);
    writeAtomically(`${base}.svg`, latencyChart(latency, chartTitle, BREAK.maxP99Ms));
    writeAtomically(`${base}.md`, markdownReport(results, `${name}.svg`));
    log(`wrote bench/results/${name}.json, .md and .svg`);

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

process.exitCode = await main();
