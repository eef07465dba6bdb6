import type { RunResult } from './measure.js';
import { median } from './stats.js';
import type { TierTail } from './tailDiagnostics.js';

/**
 * The pure half of the comparison with envoyproxy/ratelimit (bench/versus.ts): the order of its
 * runs, and what the runs of one service at one rate add up to.
 */

export interface VersusCost {
  offeredRps: number;
  serviceUs: number;
  redisUs: number;
  /** Of `redisUs`, the time Redis spent executing commands rather than on the calls' I/O. */
  redisExecutionUs: number;
  commandsPerRequest: number;
  scriptCallsPerRequest: number;
}

/** Whether an entry has closed-loop figures: every service, and of the floors the commands one. */
export const hasClosedLoop = (entry: { floor?: string }): boolean =>
  entry.floor === undefined || entry.floor === 'exact-commands';

/** One constant rate for one service, over its rounds. */
export interface VersusTier {
  offeredRps: number;
  /** The median of the rounds' successful calls per second. */
  achievedRps: number;
  /** The medians of the rounds' p50 and p99, in ms; null when no call of a round succeeded. */
  p50: number | null;
  p99: number | null;
  /** Each round's p99, in the order the rounds ran. */
  p99Rounds: (number | null)[];
  /** Calls made, and failed, over all the rounds. */
  requests: number;
  errors: number;
  errorRate: number;
  /** Of all the rounds' calls, the share answered OK within Envoy's 20 ms timeout. */
  goodput: number;
  /**
   * Of all the rounds' calls, those answered OK after tollgate's default REDIS_TIMEOUT (15 ms), end
   * to end. Absent from results written before it was counted.
   */
  late?: number;
  /** What a decision cost at this rate, the median of the rounds'; null without rounds. */
  cost: VersusCost | null;
  /** The service's event loop and GC over the rounds, with `--tail-diagnostics` only. */
  tail?: TierTail;
  verdict: 'ok' | 'break' | 'past-break';
}

/** A tier breaks with more than 1% errors, or under 95% of the offered rate achieved. */
export const VERSUS_BREAK = { minAchievedRatio: 0.95, maxErrorRate: 0.01 } as const;

/**
 * Every item once per round, the rounds one after another: A B C, A B C, A B C. Drift on a
 * shared machine then reaches every service alike, as it would not in AAA BBB CCC.
 */
export function alternate<T>(items: readonly T[], rounds: number): { round: number; item: T }[] {
  const order: { round: number; item: T }[] = [];
  for (let round = 1; round <= rounds; round += 1) {
    for (const item of items) order.push({ round, item });
  }
  return order;
}

/**
 * The median of figures that may be missing, where a missing one (no call succeeded) is worse
 * than any: it counts as infinite, and a median that lands on it is null.
 */
export function medianOrNull(values: readonly (number | null)[]): number | null {
  if (values.length === 0) return null;
  const middle = median(values.map((value) => value ?? Infinity));
  return Number.isFinite(middle) ? middle : null;
}

/** The rounds of one service at one rate, in one tier; its verdict is the caller's. */
export function summarizeTier(
  offeredRps: number,
  runs: readonly RunResult[],
): Omit<VersusTier, 'verdict'> {
  const requests = runs.reduce((sum, run) => sum + run.requests, 0);
  const ok = runs.reduce((sum, run) => sum + (run.statusCodes.OK ?? 0), 0);
  const inTime = runs.reduce((sum, run) => sum + run.answeredInTime, 0);
  const p99Rounds = runs.map((run) => run.latencyMs?.p99 ?? null);
  return {
    offeredRps,
    achievedRps: runs.length > 0 ? median(runs.map((run) => run.achievedRps)) : 0,
    p50: medianOrNull(runs.map((run) => run.latencyMs?.p50 ?? null)),
    p99: medianOrNull(p99Rounds),
    p99Rounds,
    requests,
    errors: requests - ok,
    errorRate: requests > 0 ? (requests - ok) / requests : 1,
    goodput: requests > 0 ? inTime / requests : 0,
    late: runs.reduce((sum, run) => sum + (run.answeredLate ?? 0), 0),
    cost: medianCost(runs.map(costOf)),
  };
}

export function tierBroke(tier: Omit<VersusTier, 'verdict'>): boolean {
  return (
    tier.achievedRps < VERSUS_BREAK.minAchievedRatio * tier.offeredRps ||
    tier.errorRate > VERSUS_BREAK.maxErrorRate
  );
}

/** CPU in µs per call made, from a run's share of a core over its length. */
function perDecision(run: RunResult, percent: number | null): number {
  return percent === null || run.requests === 0
    ? NaN
    : ((percent / 100) * run.seconds * 1e6) / run.requests;
}

/** What each decision of a run cost the service and Redis. */
export function costOf(run: RunResult): VersusCost {
  return {
    offeredRps: run.offeredRps ?? 0,
    serviceUs: perDecision(run, run.cpu.service),
    redisUs: perDecision(run, run.cpu.redis),
    redisExecutionUs: run.redis?.executionUsPerRequest ?? NaN,
    commandsPerRequest: run.redis?.commandsPerRequest ?? NaN,
    scriptCallsPerRequest: run.redis?.scriptCallsPerRequest ?? NaN,
  };
}

/** Each figure the median of the rounds' figures; null without rounds. */
export function medianCost(costs: readonly VersusCost[]): VersusCost | null {
  const first = costs[0];
  if (!first) return null;
  const of = (field: Exclude<keyof VersusCost, 'offeredRps'>) =>
    median(costs.map((cost) => cost[field]));
  return {
    offeredRps: first.offeredRps,
    serviceUs: of('serviceUs'),
    redisUs: of('redisUs'),
    redisExecutionUs: of('redisExecutionUs'),
    commandsPerRequest: of('commandsPerRequest'),
    scriptCallsPerRequest: of('scriptCallsPerRequest'),
  };
}

export interface ClosedLoop {
  runsRps: number[];
  medianRps: number;
  /** Medians over the rounds of the service's and Redis's CPU per decision, in µs. */
  serviceUs: number;
  redisUs: number;
  /** The median over the rounds of script calls per request: how many requests share a call. */
  scriptCallsPerRequest: number;
}

export function summarizeClosedLoop(runs: readonly RunResult[]): ClosedLoop {
  const costs = runs.map(costOf);
  return {
    runsRps: runs.map((run) => run.achievedRps),
    medianRps: runs.length > 0 ? median(runs.map((run) => run.achievedRps)) : NaN,
    serviceUs: runs.length > 0 ? median(costs.map((cost) => cost.serviceUs)) : NaN,
    redisUs: runs.length > 0 ? median(costs.map((cost) => cost.redisUs)) : NaN,
    scriptCallsPerRequest:
      runs.length > 0 ? median(costs.map((cost) => cost.scriptCallsPerRequest)) : NaN,
  };
}
