import type { Ghz } from './ghz.js';
import { measure, type Measured, type RunResult } from './measure.js';
import type { Plan } from './plan.js';
import { HEADLINE, SCENARIOS } from './scenarios.js';
import { log } from './series.js';
import { median, mean } from './stats.js';
import {
  BENCH_NODE,
  startTollgate,
  type NodeRuntime,
  type RedisServer,
  type Service,
} from './services.js';

/**
 * The performance levers, measured side by side: closed-loop throughput of the Redis store as
 * shipped, and with one setting changed (more WORKERS, or batching off), each a tollgate of its
 * own against the same Redis, in rounds that alternate with the bare server. ghz runs on the same
 * cores, so on a small machine more workers compete with the load generator as much as they help.
 */
export interface Variant {
  /** e.g. `redis-w2`. */
  name: `redis-${string}`;
  /** What differs from the defaults, for the report: e.g. `WORKERS=2`. */
  label: string;
  workers: number;
  env: Record<string, string>;
  /** The scenario it runs, when not the headline one (bench/scenarios.ts). */
  scenario?: string;
  /** Reach Redis over its Unix socket instead of TCP. */
  unixSocket?: boolean;
}

export interface VariantResult {
  name: string;
  label: string;
  scenario: string;
  workers: number;
  runsRps: number[];
  medianRps: number;
  ratioToBare: number;
  /** Mean CPU over the runs, in percent of one core: all of tollgate's processes, and ghz. */
  cpu: { service: number; ghz: number };
}

export async function runVariants(
  ghz: Ghz,
  bare: Service,
  redis: RedisServer,
  repoRoot: string,
  plan: Plan['variants'] & { concurrency: number; connections: number },
  node: NodeRuntime = BENCH_NODE,
): Promise<{ runs: RunResult[]; variants: VariantResult[] }> {
  const scenarioOf = (service: string) => {
    const wanted = plan.variants.find((variant) => variant.name === service)?.scenario;
    const found = SCENARIOS.find((scenario) => scenario.name === wanted);
    if (wanted && !found) throw new Error(`variant ${service}: no scenario '${wanted}'`);
    return found ?? HEADLINE;
  };
  const started: Service[] = [];
  try {
    for (const variant of plan.variants) {
      started.push(
        await startTollgate({
          repoRoot,
          name: variant.name,
          redisUrl: variant.unixSocket ? `unix://${redis.unixSocket}` : redis.url,
          workers: variant.workers,
          env: variant.env,
          node,
        }),
      );
    }
    const targets: Measured[] = [
      { service: bare },
      ...started.map((service) => ({ service, redis })),
    ];
    const load = {
      concurrency: plan.concurrency,
      connections: plan.connections,
      timeoutMs: 5_000,
      seconds: plan.seconds,
    };
    const runs: RunResult[] = [];
    for (let round = 1; round <= plan.rounds; round += 1) {
      for (const target of targets) {
        log(`levers round ${round}/${plan.rounds}: ${target.service.name}`);
        runs.push(await measure(ghz, target, scenarioOf(target.service.name), load));
      }
    }
    const of = (name: string) => runs.filter((run) => run.service === name);
    const bareRps = median(of('bare').map((run) => run.achievedRps));
    const variants = plan.variants.map(({ name, label, workers }) => {
      const scenario = scenarioOf(name).name;
      const mine = of(name);
      const rps = mine.map((run) => run.achievedRps);
      return {
        name,
        label,
        scenario,
        workers,
        runsRps: rps,
        medianRps: median(rps),
        ratioToBare: median(rps) / bareRps,
        cpu: {
          service: mean(mine.map((run) => run.cpu.service)),
          ghz: mean(mine.map((run) => run.cpu.ghz)),
        },
      };
    });
    return { runs, variants };
  } finally {
    await Promise.all(started.map((service) => service.stop?.()));
  }
}
