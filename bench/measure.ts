import type { Ghz, GhzLoad } from './ghz.js';
import { readStat, treeCpuSeconds } from './procstat.js';
import {
  allCalls,
  executionMicros,
  difference,
  redisCommandCalls,
  scriptCalls,
  tollgateOutcomes,
  type Counts,
} from './probes.js';
import type { Scenario } from './scenarios.js';
import type { RedisServer, Service } from './services.js';

/** One measured ghz run against one service, with what it cost each process. */
export interface RunResult {
  service: string;
  scenario: string;
  /** Requests per second asked for; null in a closed loop, which asks for as many as it gets. */
  offeredRps: number | null;
  /** Successful calls per second over the run. */
  achievedRps: number;
  requests: number;
  seconds: number;
  latencyMs: { p50: number; p95: number; p99: number; max: number; mean: number } | null;
  /** gRPC status names from ghz, OK included. */
  statusCodes: Counts;
  errors: Counts;
  errorRate: number;
  /** Calls answered OK within Envoy's default 20 ms timeout (ghz.ts, GOODPUT_MS). */
  answeredInTime: number;
  /** Calls answered OK after tollgate's default REDIS_TIMEOUT (ghz.ts, LATE_MS). */
  answeredLate?: number;
  /** Percent of one core over the run. */
  cpu: { service: number; redis: number | null; ghz: number };
  /**
   * Redis calls per request (evalsha+eval), every command per request, and the µs per request
   * Redis spent executing them (the rest of its CPU reads, parses and answers); null without Redis.
   */
  redis: {
    scriptCallsPerRequest: number;
    commandsPerRequest: number;
    executionUsPerRequest: number;
    commands: Counts;
  } | null;
  /** tollgate's answers by outcome during the run; null for the bare server. */
  outcomes: Counts | null;
}

export interface Measured {
  service: Service;
  /** Set only for the tollgate that uses it, so the other runs leave its counters alone. */
  redis?: RedisServer;
}

export async function measure(
  ghz: Ghz,
  target: Measured,
  scenario: Scenario,
  load: Omit<GhzLoad, 'address' | 'request'>,
): Promise<RunResult> {
  const { service, redis } = target;
  const commandsBefore = redis ? await redisCommandCalls(redis.client) : undefined;
  const outcomesBefore = service.httpUrl ? await tollgateOutcomes(service.httpUrl) : undefined;
  const serviceBefore = treeCpuSeconds(service.pid);
  const redisBefore = redis ? readStat(redis.pid)?.cpuSeconds : undefined;

  const result = await ghz.run({ ...load, address: service.address, request: scenario.request });

  const serviceCpu = treeCpuSeconds(service.pid) - serviceBefore;
  const redisAfter = redis ? readStat(redis.pid)?.cpuSeconds : undefined;
  // The services idle while ghz starts, so their share is over the load itself; ghz's own CPU
  // includes its start-up, so its share is over its whole life.
  const percent = (seconds: number) => (100 * seconds) / result.totalSeconds;
  const ok = result.statusCodes.OK ?? 0;
  let redisCost: RunResult['redis'] = null;
  if (redis && commandsBefore) {
    const commands = difference(await redisCommandCalls(redis.client), commandsBefore);
    const perRequest = (calls: number) => (result.count > 0 ? calls / result.count : 0);
    redisCost = {
      scriptCallsPerRequest: perRequest(scriptCalls(commands)),
      commandsPerRequest: perRequest(allCalls(commands)),
      executionUsPerRequest: perRequest(executionMicros(commands)),
      commands,
    };
  }
  return {
    service: service.name,
    scenario: scenario.name,
    offeredRps: load.rps ?? null,
    achievedRps: result.totalSeconds > 0 ? ok / result.totalSeconds : 0,
    requests: result.count,
    seconds: result.totalSeconds,
    latencyMs: result.latencyMs,
    statusCodes: result.statusCodes,
    errors: result.errors,
    errorRate: result.count > 0 ? (result.count - ok) / result.count : 1,
    answeredInTime: result.answeredInTime,
    answeredLate: result.answeredLate,
    cpu: {
      service: percent(serviceCpu),
      redis:
        redisBefore !== undefined && redisAfter !== undefined
          ? percent(redisAfter - redisBefore)
          : null,
      ghz: (100 * result.cpuSeconds) / result.wallSeconds,
    },
    redis: redisCost,
    outcomes:
      service.httpUrl && outcomesBefore
        ? difference(await tollgateOutcomes(service.httpUrl), outcomesBefore)
        : null,
  };
}
