import type { Ghz } from './ghz.js';
import { measure, type Measured, type RunResult } from './measure.js';
import { BREAK, type Plan } from './plan.js';
import { HEADLINE, SCENARIOS } from './scenarios.js';
import { median } from './stats.js';

/** The three kinds of measurement, each a sequence of ghz runs with its own rules. */

export interface ThroughputService {
  service: string;
  runsRps: number[];
  medianRps: number;
  ratioToBare: number;
}

export interface Tier extends RunResult {
  /** ok; break (the first tier that fails a criterion); past-break (the one run after it). */
  verdict: 'ok' | 'break' | 'past-break';
  reasons: string[];
}

export interface LatencySeries {
  service: string;
  tiers: Tier[];
  /** The offered rate of the break tier; null when no tier tried broke. */
  breakRps: number | null;
  breakReasons: string[];
}

export interface ScenarioRuns {
  scenario: string;
  title: string;
  service: string;
  throughput: RunResult;
  latency: RunResult;
}

/** Closed loop, rounds that alternate the services so drift on the machine hits each alike. */
export async function runThroughput(ghz: Ghz, targets: Measured[], plan: Plan['throughput']) {
  const load = { concurrency: plan.concurrency, connections: plan.connections, timeoutMs: 5_000 };
  for (const { service } of targets) {
    await ghz.run({
      ...load,
      seconds: plan.warmupSeconds,
      address: service.address,
      request: HEADLINE.request,
    });
  }
  const runs: RunResult[] = [];
  for (let round = 1; round <= plan.rounds; round += 1) {
    for (const target of targets) {
      log(`throughput round ${round}/${plan.rounds}: ${target.service.name}`);
      runs.push(await measure(ghz, target, HEADLINE, { ...load, seconds: plan.seconds }));
    }
  }
  const medians = new Map(
    targets.map(({ service }) => {
      const rps = runs.filter((run) => run.service === service.name).map((run) => run.achievedRps);
      return [service.name, { rps, median: median(rps) }] as const;
    }),
  );
  const bare = medians.get('bare')?.median ?? NaN;
  const services: ThroughputService[] = [...medians].map(([service, { rps, median: m }]) => ({
    service,
    runsRps: rps,
    medianRps: m,
    ratioToBare: m / bare,
  }));
  return { runs, services };
}

export function breakReasons(run: RunResult): string[] {
  const reasons: string[] = [];
  const offered = run.offeredRps ?? 0;
  if (run.achievedRps < BREAK.minAchievedRatio * offered) {
    reasons.push(`achieved ${Math.round((100 * run.achievedRps) / offered)}% of offered`);
  }
  if (run.errorRate > BREAK.maxErrorRate) {
    reasons.push(`errors ${(100 * run.errorRate).toFixed(1)}%`);
  }
  if (!run.latencyMs) reasons.push('no call succeeded');
  else if (run.latencyMs.p99 > BREAK.maxP99Ms)
    reasons.push(`p99 ${run.latencyMs.p99.toFixed(2)} ms`);
  return reasons;
}

/** Constant arrival rate, tier by tier (services alternating), each up to one tier past its break. */
export async function runLatency(ghz: Ghz, targets: Measured[], plan: Plan['latency']) {
  const series = targets.map((target) => {
    const result: LatencySeries = {
      service: target.service.name,
      tiers: [],
      breakRps: null,
      breakReasons: [],
    };
    return { target, result };
  });
  const load = {
    concurrency: plan.concurrency,
    connections: plan.connections,
    timeoutMs: plan.timeoutMs,
  };
  for (const rps of plan.tiers) {
    for (const { target, result } of series) {
      if (result.tiers.some((tier) => tier.verdict === 'past-break')) continue;
      log(`latency ${rps} req/s: ${target.service.name}`);
      const address = target.service.address;
      await ghz.run({
        ...load,
        rps,
        seconds: plan.warmupSeconds,
        address,
        request: HEADLINE.request,
      });
      const run = await measure(ghz, target, HEADLINE, { ...load, rps, seconds: plan.seconds });
      const reasons = breakReasons(run);
      const verdict = result.breakRps !== null ? 'past-break' : reasons.length > 0 ? 'break' : 'ok';
      if (verdict === 'break') {
        result.breakRps = rps;
        result.breakReasons = reasons;
      }
      result.tiers.push({ ...run, verdict, reasons });
    }
  }
  return series.map(({ result }) => result);
}

/** Every scenario on each tollgate: one closed-loop run, one at the scenario rate. */
export async function runScenarios(ghz: Ghz, targets: Measured[], plan: Plan) {
  const closed = {
    concurrency: plan.throughput.concurrency,
    connections: plan.throughput.connections,
    timeoutMs: 5_000,
    seconds: plan.scenarios.throughputSeconds,
  };
  const open = {
    concurrency: plan.latency.concurrency,
    connections: plan.latency.connections,
    timeoutMs: plan.latency.timeoutMs,
    rps: plan.scenarios.rps,
    seconds: plan.scenarios.latencySeconds,
  };
  const results: ScenarioRuns[] = [];
  for (const scenario of SCENARIOS) {
    for (const target of targets) {
      log(`scenario ${scenario.name}: ${target.service.name}`);
      results.push({
        scenario: scenario.name,
        title: scenario.title,
        service: target.service.name,
        throughput: await measure(ghz, target, scenario, closed),
        latency: await measure(ghz, target, scenario, open),
      });
    }
  }
  return results;
}

export function log(message: string): void {
  console.error(`bench: ${message}`);
}
