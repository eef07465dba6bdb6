import type { AdmissionResult } from './admission.js';
import type { Machine } from './machine.js';
import type { MemoryRun } from './memory.js';
import type { VariantResult } from './variants.js';
import type { VersusResults } from './versus.js';
import type { RunResult } from './measure.js';
import { BREAK, type Plan } from './plan.js';
import type { LatencySeries, ScenarioRuns, ThroughputService } from './series.js';

/** Everything one bench run wrote to bench/results/<name>.json. */
export interface BenchResults {
  name: string;
  mode: Plan['mode'];
  command: string;
  startedAt: string;
  durationSeconds: number;
  machine: Machine;
  plan: Plan;
  breakCriteria: typeof BREAK;
  services: { name: string; title: string; settings: Record<string, string> }[];
  throughput: { runs: RunResult[]; services: ThroughputService[] };
  latency: LatencySeries[];
  scenarios: ScenarioRuns[];
  admission: AdmissionResult[];
  variants: { runs: RunResult[]; variants: VariantResult[] };
  memory: MemoryRun[];
  versus: VersusResults;
  targets: Target[];
}

/** A performance target of the brief, judged from this run; `value` null when not reached. */
export interface Target {
  name: string;
  target: string;
  value: number | null;
  met: boolean;
  note: string;
}

export function judgeTargets(results: Omit<BenchResults, 'targets'>): Target[] {
  const scenarioCalls = results.scenarios
    .filter((run) => run.service === 'redis' && run.scenario !== 'abusive-tenant')
    .map((run) => run.throughput.redis?.scriptCallsPerRequest ?? NaN);
  const worstCalls = Math.max(...scenarioCalls);
  const redis = results.throughput.services.find((service) => service.service === 'redis');
  const at5k = (service: string) =>
    results.latency
      .find((series) => series.service === service)
      ?.tiers.find((tier) => tier.offeredRps === 5_000)?.latencyMs?.p99 ?? null;
  const p99 = at5k('redis');
  return [
    ...versusTargets(results.versus),
    {
      name: 'Redis calls per request',
      target: '≤ 1.00',
      value: worstCalls,
      met: worstCalls <= 1.005,
      note:
        'the most among the Redis runs of every allowed scenario (the abusive one is left out); ' +
        'under 1 when calls made together are batched',
    },
    {
      name: 'throughput, Redis store ÷ bare',
      target: '≥ 0.80',
      value: redis?.ratioToBare ?? null,
      met: (redis?.ratioToBare ?? 0) >= 0.8,
      note: 'medians of the alternating closed-loop runs',
    },
    {
      name: 'p99 at 5,000 req/s, Redis store',
      target: '≤ 2 ms',
      value: p99,
      met: p99 !== null && p99 <= BREAK.maxP99Ms,
      note: p99 === null ? 'the 5,000 req/s tier was not run' : 'constant arrival rate',
    },
  ];
}

/**
 * The check `--quick` makes: every field of every run is present and finite, so the bench works.
 * It says nothing about speed. Returns the problems found.
 */
export function missingFields(results: BenchResults): string[] {
  const problems: string[] = [];
  const number = (where: string, value: unknown) => {
    if (typeof value !== 'number' || !Number.isFinite(value)) problems.push(`${where}: ${value}`);
  };
  const checkRun = (where: string, run: RunResult) => {
    number(`${where}.achievedRps`, run.achievedRps);
    number(`${where}.requests`, run.requests);
    if (run.requests <= 0) problems.push(`${where}: no requests`);
    for (const key of ['p50', 'p95', 'p99', 'max'] as const) {
      number(`${where}.latencyMs.${key}`, run.latencyMs?.[key]);
    }
    if (Object.keys(run.statusCodes).length === 0) problems.push(`${where}: no status codes`);
    number(`${where}.cpu.service`, run.cpu.service);
    number(`${where}.cpu.ghz`, run.cpu.ghz);
    if (run.service === 'redis') {
      number(`${where}.cpu.redis`, run.cpu.redis);
      number(`${where}.redis.scriptCallsPerRequest`, run.redis?.scriptCallsPerRequest);
    }
    // The reference and the bare floors have no /metrics of tollgate's to read outcomes from.
    const hasMetrics = run.service !== 'reference' && !run.service.startsWith('bare');
    if (hasMetrics && !run.outcomes) {
      problems.push(`${where}: no outcomes`);
    }
  };
  results.throughput.runs.forEach((run, i) => checkRun(`throughput.runs[${i}]`, run));
  for (const service of results.throughput.services) {
    number(`throughput.${service.service}.medianRps`, service.medianRps);
    number(`throughput.${service.service}.ratioToBare`, service.ratioToBare);
  }
  for (const series of results.latency) {
    if (series.tiers.length === 0) problems.push(`latency.${series.service}: no tiers`);
    series.tiers.forEach((tier, i) => {
      checkRun(`latency.${series.service}[${i}]`, tier);
      number(`latency.${series.service}[${i}].offeredRps`, tier.offeredRps);
    });
  }
  for (const run of results.scenarios) {
    checkRun(`scenarios.${run.scenario}.${run.service}.throughput`, run.throughput);
    checkRun(`scenarios.${run.scenario}.${run.service}.latency`, run.latency);
  }
  results.variants.runs.forEach((run, i) => checkRun(`variants.runs[${i}]`, run));
  for (const variant of results.variants.variants) {
    number(`variants.${variant.name}.medianRps`, variant.medianRps);
    number(`variants.${variant.name}.ratioToBare`, variant.ratioToBare);
  }
  if (!results.variants.variants.some((variant) => variant.workers > 1)) {
    problems.push('variants: no run with WORKERS > 1');
  }
  if (results.memory.length === 0) problems.push('memory: not run');
  for (const run of results.memory) {
    if (run.requests <= 0) problems.push(`memory.${run.service}: no requests`);
    number(`memory.${run.service}.rssBytes.before`, run.rssBytes.before);
    number(`memory.${run.service}.rssBytes.after`, run.rssBytes.after);
    if (run.samples.length < 2) problems.push(`memory.${run.service}: fewer than 2 samples`);
    if (run.service === 'redis') number(`memory.redis.bytesPerKey`, run.redis?.bytesPerKey);
  }
  if (results.versus.scenarios.length === 0) problems.push('versus: not run');
  results.versus.runs.forEach((run, i) => checkRun(`versus.runs[${i}]`, run));
  for (const { scenario, entries } of results.versus.scenarios) {
    for (const entry of entries.filter((candidate) => !candidate.floor)) {
      number(`versus.${scenario}.${entry.service}.medianRps`, entry.closedLoop.medianRps);
      number(`versus.${scenario}.${entry.service}.cost.serviceUs`, entry.cost?.serviceUs);
      number(`versus.${scenario}.${entry.service}.cost.redisUs`, entry.cost?.redisUs);
    }
  }
  if (results.admission.length === 0) problems.push('admission: not run');
  for (const check of results.admission)
    number(`admission.${check.service}.allowed`, check.allowed);
  for (const field of ['cpuModel', 'cores', 'node', 'redis', 'ghz'] as const) {
    if (!results.machine[field]) problems.push(`machine.${field} missing`);
  }
  return problems;
}

/** The targets against envoyproxy/ratelimit, per scenario: tollgate with fixed windows ÷ it. */
export function versusTargets(versus: VersusResults): Target[] {
  const targets: Target[] = [];
  for (const { scenario, entries } of versus.scenarios) {
    const reference = entries.find((entry) => entry.service === 'reference');
    const tollgate = entries.find((entry) => entry.service === 'tollgate-fixed');
    if (!reference || !tollgate) continue;
    const ratio = (a: number | undefined, b: number | undefined) =>
      a === undefined || b === undefined || !(b > 0) ? null : a / b;
    const cpu = ratio(tollgate.cost?.serviceUs, reference.cost?.serviceUs);
    const redisCpu = ratio(tollgate.cost?.redisUs, reference.cost?.redisUs);
    targets.push(
      {
        name: `service CPU per decision ÷ reference, ${scenario}`,
        target: '≤ 0.80',
        value: cpu,
        met: cpu !== null && cpu <= 0.8,
        note: `at ${reference.cost?.offeredRps ?? '?'} req/s: ${us(tollgate.cost?.serviceUs)} against ${us(reference.cost?.serviceUs)}`,
      },
      {
        name: `Redis CPU per decision ÷ reference, ${scenario}`,
        target: '≤ 0.50',
        value: redisCpu,
        met: redisCpu !== null && redisCpu <= 0.5,
        note: `${us(tollgate.cost?.redisUs)} against ${us(reference.cost?.redisUs)}; Redis commands per request ${fixed(tollgate.cost?.commandsPerRequest)} against ${fixed(reference.cost?.commandsPerRequest)}`,
      },
    );
    const tiersCompared = [1_000, 2_000, 3_000].map((rps) => ({
      rps,
      mine: tollgate.tiers.find((tier) => tier.offeredRps === rps)?.p99 ?? undefined,
      theirs: reference.tiers.find((tier) => tier.offeredRps === rps)?.p99 ?? undefined,
    }));
    const p99Ratios = tiersCompared.map(({ mine, theirs }) => ratio(mine, theirs));
    const worst = p99Ratios.some((r) => r === null) ? null : Math.max(...(p99Ratios as number[]));
    targets.push({
      name: `p99 ÷ reference at 1,000, 2,000 and 3,000 req/s, ${scenario}`,
      target: '≤ 1.00',
      value: worst,
      met: worst !== null && worst <= 1,
      note: tiersCompared
        .map(({ rps, mine, theirs }) => `${rps}: ${fixed(mine)} against ${fixed(theirs)} ms`)
        .join('; '),
    });
    const below = tollgate.tiers.filter(
      (tier) => reference.breakRps === null || tier.offeredRps < reference.breakRps,
    );
    const errors = below.reduce((sum, tier) => sum + tier.errors, 0);
    targets.push({
      name: `errors below the reference's break, ${scenario}`,
      target: '0',
      value: errors,
      met: errors === 0 && below.length > 0,
      note:
        reference.breakRps === null
          ? `the reference did not break up to ${Math.max(...reference.tiers.map((t) => t.offeredRps))} req/s`
          : `the reference broke at ${reference.breakRps} req/s; tollgate's tiers below it: ${below.map((t) => t.offeredRps).join(', ')}`,
    });
  }
  return targets;
}

const us = (value: number | undefined) =>
  value === undefined || !Number.isFinite(value) ? 'n/a' : `${value.toFixed(0)} µs`;
const fixed = (value: number | undefined | null) =>
  value === undefined || value === null || !Number.isFinite(value) ? 'n/a' : value.toFixed(2);
