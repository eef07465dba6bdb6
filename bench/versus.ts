import type { Ghz } from './ghz.js';
import { measure, type Measured, type RunResult } from './measure.js';
import { log } from './series.js';
import {
  startBare,
  startReference,
  startTollgate,
  type RedisServer,
  type Service,
} from './services.js';
import { median } from './stats.js';
import { VERSUS_READY, VERSUS_RULES_YAML, VERSUS_SCENARIOS } from './versusScenarios.js';

/**
 * tollgate against envoyproxy/ratelimit, side by side on the same Redis and rules: the
 * reference, tollgate with fixed windows (the reference's semantics, which the targets compare),
 * and tollgate as shipped (sliding windows). Each keeps its own default REDIS_TIMEOUT. For one
 * and for three descriptors:
 * - closed-loop throughput, in rounds that alternate the services;
 * - constant arrival rates, tier by tier, each service up to one tier past its own break (more
 *   than 1% errors, or under 95% of the offered rate achieved);
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
  rounds: number;
  tierSeconds: number;
  tiers: number[];
  /** The tier whose runs give the cost per decision. */
  costRps: number;
  concurrency: number;
  connections: number;
  /** Calls still waiting past this fail. */
  timeoutMs: number;
}

export interface VersusCost {
  offeredRps: number;
  serviceUs: number;
  redisUs: number;
  /** Of `redisUs`, the time Redis spent executing commands rather than on the calls' I/O. */
  redisExecutionUs: number;
  commandsPerRequest: number;
  scriptCallsPerRequest: number;
}

export interface VersusTier {
  offeredRps: number;
  achievedRps: number;
  p50: number | null;
  p99: number | null;
  errors: number;
  errorRate: number;
  verdict: 'ok' | 'break' | 'past-break';
}

export interface VersusEntry {
  service: string;
  /** A bare server: no closed loop, no Redis, tiers up to the cost tier only. */
  floor?: boolean;
  closedLoop: { runsRps: number[]; medianRps: number };
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
  }[];
  scenarios: VersusScenario[];
  runs: RunResult[];
}

const BREAK = { minAchievedRatio: 0.95, maxErrorRate: 0.01 } as const;

function broke(run: RunResult): boolean {
  const offered = run.offeredRps ?? 0;
  return run.achievedRps < BREAK.minAchievedRatio * offered || run.errorRate > BREAK.maxErrorRate;
}

function costOf(run: RunResult): VersusCost {
  const perDecision = (percent: number | null) =>
    percent === null || run.requests === 0
      ? NaN
      : ((percent / 100) * run.seconds * 1e6) / run.requests;
  return {
    offeredRps: run.offeredRps ?? 0,
    serviceUs: perDecision(run.cpu.service),
    redisUs: perDecision(run.cpu.redis),
    redisExecutionUs: run.redis?.executionUsPerRequest ?? NaN,
    commandsPerRequest: run.redis?.commandsPerRequest ?? NaN,
    scriptCallsPerRequest: run.redis?.scriptCallsPerRequest ?? NaN,
  };
}

export async function runVersus(
  ghz: Ghz,
  redis: RedisServer,
  repoRoot: string,
  benchDir: string,
  plan: VersusPlan,
  /** Settings for both tollgates, beside the bench's own (a lever to try). */
  extraEnv: Record<string, string> = {},
): Promise<VersusResults> {
  const started: Service[] = [];
  const rules = { yaml: VERSUS_RULES_YAML, ready: VERSUS_READY };
  const timeouts = new Map<string, string>();
  try {
    started.push(await startReference(repoRoot, redis));
    timeouts.set('reference', '10s (its default)');
    const tollgates = [
      {
        name: 'tollgate-fixed',
        title: 'tollgate, fixed windows (DEFAULT_ALGORITHM=fixed_window)',
        env: { DEFAULT_ALGORITHM: 'fixed_window' },
      },
      { name: 'tollgate-sliding', title: 'tollgate as shipped (sliding windows)', env: {} },
    ] as const;
    for (const { name, title, env } of tollgates) {
      const service = await startTollgate({
        repoRoot,
        name,
        redisUrl: redis.url,
        workers: 1,
        rules,
        // tollgate's own default, rather than the bench's generous one.
        env: { ...env, REDIS_TIMEOUT: '15ms', ...extraEnv },
      });
      started.push({ ...service, title });
      timeouts.set(name, '15ms (its default)');
    }
    const targets: Measured[] = started.map((service) => ({ service, redis }));
    const floors: Service[] = [await startBare(benchDir), await startBare(benchDir, 'http2')];
    started.push(...floors);
    for (const floor of floors) timeouts.set(floor.name, 'no Redis');
    const runs: RunResult[] = [];
    const scenarios: VersusScenario[] = [];
    const closed = {
      concurrency: plan.concurrency,
      connections: plan.connections,
      timeoutMs: 5_000,
    };
    for (const scenario of VERSUS_SCENARIOS) {
      for (const service of started) {
        await ghz.run({
          ...closed,
          seconds: plan.warmupSeconds,
          address: service.address,
          request: scenario.request,
        });
      }
      const entries = new Map<string, VersusEntry>(
        started.map((service) => [
          service.name,
          {
            service: service.name,
            ...(floors.includes(service) ? { floor: true } : {}),
            closedLoop: { runsRps: [], medianRps: NaN },
            cost: null,
            tiers: [],
            breakRps: null,
          },
        ]),
      );
      for (let round = 1; round <= plan.rounds; round += 1) {
        for (const target of targets) {
          log(
            `versus ${scenario.name}, closed loop ${round}/${plan.rounds}: ${target.service.name}`,
          );
          const run = await measure(ghz, target, scenario, {
            ...closed,
            seconds: plan.closedSeconds,
          });
          runs.push(run);
          entries.get(target.service.name)!.closedLoop.runsRps.push(run.achievedRps);
        }
      }
      for (const entry of entries.values()) {
        entry.closedLoop.medianRps = median(entry.closedLoop.runsRps);
      }
      const load = {
        concurrency: plan.concurrency,
        connections: plan.connections,
        timeoutMs: plan.timeoutMs,
      };
      const floorTargets: Measured[] = floors.map((service) => ({ service }));
      for (const rps of plan.tiers) {
        const tierTargets = rps <= plan.costRps ? [...targets, ...floorTargets] : targets;
        for (const target of tierTargets) {
          const entry = entries.get(target.service.name)!;
          if (entry.tiers.some((tier) => tier.verdict === 'past-break')) continue;
          log(`versus ${scenario.name}, ${rps} req/s: ${target.service.name}`);
          const run = await measure(ghz, target, scenario, {
            ...load,
            rps,
            seconds: plan.tierSeconds,
          });
          runs.push(run);
          const verdict = entry.breakRps !== null ? 'past-break' : broke(run) ? 'break' : 'ok';
          if (verdict === 'break') entry.breakRps = rps;
          entry.tiers.push({
            offeredRps: rps,
            achievedRps: run.achievedRps,
            p50: run.latencyMs?.p50 ?? null,
            p99: run.latencyMs?.p99 ?? null,
            errors: run.requests - (run.statusCodes.OK ?? 0),
            errorRate: run.errorRate,
            verdict,
          });
          if (rps === plan.costRps) entry.cost = costOf(run);
        }
      }
      scenarios.push({
        scenario: scenario.name,
        title: scenario.title,
        entries: [...entries.values()],
      });
    }
    return {
      services: started.map((service) => ({
        name: service.name,
        title: service.title,
        redisTimeout: timeouts.get(service.name) ?? '',
        settings: service.settings,
      })),
      scenarios,
      runs,
    };
  } finally {
    await Promise.all(started.map((service) => service.stop?.()));
  }
}
