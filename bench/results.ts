import { LATE_MS } from './ghz.js';
import type { AdmissionResult } from './admission.js';
import type { Machine } from './machine.js';
import type { MemoryRun } from './memory.js';
import { rlqsProblems, type RlqsResults } from './rlqs.js';
import { rlqsBoundProblems, STEADY_OVER, type RlqsBoundResults } from './rlqsBound.js';
import type { VariantResult } from './variants.js';
import type { VersusEntry, VersusResults } from './versus.js';
import { hasClosedLoop } from './versusRounds.js';
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
  services: { name: string; title: string; settings: Record<string, string>; node?: string }[];
  throughput: { runs: RunResult[]; services: ThroughputService[] };
  latency: LatencySeries[];
  scenarios: ScenarioRuns[];
  admission: AdmissionResult[];
  variants: { runs: RunResult[]; variants: VariantResult[] };
  memory: MemoryRun[];
  versus: VersusResults;
  rlqs: RlqsResults;
  rlqsBound: RlqsBoundResults;
  targets: Target[];
}

/** One of tollgate's performance targets, judged from this run; `value` null when not reached. */
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
    ...rlqsBoundTargets(results.rlqsBound),
  ];
}

/** RLQS's over-admission bound: the worst measured window, and the worst join, of any scenario. */
function rlqsBoundTargets(bound: RlqsBoundResults): Target[] {
  const entries = bound.entries;
  const steady = entries.length ? Math.max(...entries.map((entry) => entry.maxOfLimit)) : NaN;
  const joins = entries.map((entry) => entry.join?.ofLimit ?? NaN);
  const join = joins.length ? Math.max(...joins) : NaN;
  return [
    {
      name: 'RLQS admitted per window ÷ L, steady state',
      target: `≤ ${(1 + STEADY_OVER).toFixed(2)}`,
      value: Number.isFinite(steady) ? steady : null,
      met: entries.length > 0 && entries.every((entry) => entry.steadyMet),
      note: 'the worst measured window of any scenario (bench/rlqsBound.ts)',
    },
    {
      name: 'RLQS admitted in the join window ÷ L',
      target: "≤ 1 + one assignment's worth",
      value: Number.isFinite(join) ? join : null,
      met: entries.length > 0 && entries.every((entry) => entry.joinMet),
      note: "the worst join of any scenario; one assignment's worth is each scenario's own",
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
    if (['redis', ROUND_TRIP_FLOOR, COMMANDS_FLOOR].includes(run.service)) {
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
    for (const entry of entries) {
      const where = `versus.${scenario}.${entry.service}`;
      entry.tiers.forEach((tier, i) => number(`${where}.tiers[${i}].goodput`, tier.goodput));
      // A service that broke below the cost tier has no cost to report, which is a result.
      const reachedCost = entry.tiers.some((tier) => tier.offeredRps === results.versus.costRps);
      if (reachedCost) number(`${where}.cost.serviceUs`, entry.cost?.serviceUs);
      if (entry.floor === 'no-redis') continue;
      if (reachedCost) number(`${where}.cost.redisUs`, entry.cost?.redisUs);
      if (!hasClosedLoop(entry)) continue;
      number(`${where}.medianRps`, entry.closedLoop.medianRps);
      number(`${where}.closedLoop.redisUs`, entry.closedLoop.redisUs);
    }
  }
  if (results.versus.admission.length === 0) problems.push('versus.admission: not run');
  problems.push(...rlqsProblems(results.rlqs));
  problems.push(...rlqsBoundProblems(results.rlqsBound));
  if (results.admission.length === 0) problems.push('admission: not run');
  for (const check of results.admission)
    number(`admission.${check.service}.allowed`, check.allowed);
  for (const field of ['cpuModel', 'cores', 'node', 'redis', 'ghz'] as const) {
    if (!results.machine[field]) problems.push(`machine.${field} missing`);
  }
  return problems;
}

/** A ratio of two figures, or null when either is missing or the divisor is not positive. */
function ratioOf(
  mine: number | null | undefined,
  theirs: number | null | undefined,
): number | null {
  if (mine === null || mine === undefined || theirs === null || theirs === undefined) return null;
  if (!Number.isFinite(mine) || !Number.isFinite(theirs) || !(theirs > 0)) return null;
  return mine / theirs;
}

const rate = (rps: number) => rps.toLocaleString('en-US');

/** A target met when the ratio is within `goal` (at most, or at least), and missed otherwise. */
function ratioTarget(
  name: string,
  ratio: number | null,
  goal: { atMost: number } | { atLeast: number },
  note: string,
): Target {
  const met = ratio !== null && ('atMost' in goal ? ratio <= goal.atMost : ratio >= goal.atLeast);
  const target =
    'atMost' in goal ? `≤ ${goal.atMost.toFixed(2)}×` : `≥ ${goal.atLeast.toFixed(2)}×`;
  return { name, target, value: ratio, met, note };
}

/** The tollgate the targets judge: the working tree with fixed windows. */
export const JUDGED = 'tollgate-fixed';

/** The floor the p99 targets compare with: bare node:http2, no Redis (bareServer.ts). */
export const P99_FLOOR = 'bare-http2';

/** The floor making one Redis round trip per call and deciding nothing (bareServer.ts). */
export const ROUND_TRIP_FLOOR = 'bare-http2-redis';

/** The floor running exactly an exact decision's Redis commands (bench/commandsFloor.ts). */
export const COMMANDS_FLOOR = 'bare-http2-commands';

/** The constant rates at which Redis's CPU per decision is judged. */
export const REDIS_COST_TIERS: readonly number[] = [1_000, 3_000];
const P99_TIERS = [1_000, 2_000, 3_000];
/** Redis's CPU per decision at most this many times the reference's: at a constant rate, closed loop. */
const TIER_REDIS_GOAL = 1.2;
const CLOSED_REDIS_GOAL = 0.6;

/**
 * tollgate's performance targets, each a ratio in the same run, per scenario (one and three
 * descriptors), for tollgate with fixed windows: its CPU, Redis's and its closed-loop throughput
 * against the reference's, and its p99 against the bare node:http2 floor's; then exactness, from
 * the over-admission check.
 */
export function versusTargets(versus: VersusResults): Target[] {
  const targets: Target[] = [];
  for (const { scenario, entries } of versus.scenarios) {
    const reference = entries.find((entry) => entry.service === 'reference');
    const tollgate = entries.find((entry) => entry.service === JUDGED);
    const floor = entries.find((entry) => entry.service === P99_FLOOR);
    const commands = entries.find((entry) => entry.service === COMMANDS_FLOOR);
    const roundTrip = entries.find((entry) => entry.service === ROUND_TRIP_FLOOR);
    if (!reference || !tollgate) continue;
    const compared = { reference, tollgate, floor, commands, roundTrip };
    targets.push(...scenarioTargets(scenario, versus.costRps, compared));
  }
  const check = versus.admission.find((result) => result.service === JUDGED);
  const theirs = versus.admission.find((result) => result.service === 'reference');
  targets.push({
    name: 'exactness: requests allowed on one key under load',
    target: `= the limit, ${(check ?? theirs)?.limit ?? '?'}`,
    value: check ? check.allowed : null,
    met: check?.exact ?? false,
    note: check
      ? `${check.allowed} of ${check.requests} concurrent requests allowed` +
        (theirs ? `; the reference allowed ${theirs.allowed}` : '')
      : 'the over-admission check was not run',
  });
  return targets;
}

interface Compared {
  reference: VersusEntry;
  tollgate: VersusEntry;
  floor: VersusEntry | undefined;
  commands: VersusEntry | undefined;
  /** The node:http2 floor making one Redis round trip per call (bare-http2-redis). */
  roundTrip: VersusEntry | undefined;
}

/**
 * The commands floor's Redis CPU per decision and its ratio to the reference's, for a Redis-CPU
 * target's note: a floor over the target itself rules the target out for any exact design on hash
 * counters read with Redis TIME, whatever its logic.
 */
function commandsFloorNote(
  floorUs: number | undefined,
  referenceUs: number | undefined,
  goal: number,
): string {
  if (floorUs === undefined) return '';
  return floorNote('the commands floor', us(floorUs), ratioOf(floorUs, referenceUs), goal);
}

/** `; FLOOR: VALUE, RATIO×`, and whether that floor is over the target's goal itself. */
function floorNote(floor: string, value: string, ratio: number | null, goal: number): string {
  const over = ratio !== null && ratio > goal ? ', over the target itself' : '';
  return `; ${floor}: ${value}, ${ratio === null ? 'n/a' : `${ratio.toFixed(2)}×`}${over}`;
}

const tierOf = (entry: VersusEntry | undefined, rps: number) =>
  entry?.tiers.find((tier) => tier.offeredRps === rps);

function scenarioTargets(scenario: string, costRps: number, compared: Compared): Target[] {
  const { reference, tollgate } = compared;
  return [
    ratioTarget(
      `service CPU per decision at ${rate(costRps)} req/s, ${scenario}`,
      ratioOf(tollgate.cost?.serviceUs, reference.cost?.serviceUs),
      { atMost: 0.8 },
      `${us(tollgate.cost?.serviceUs)} against ${us(reference.cost?.serviceUs)}`,
    ),
    ...REDIS_COST_TIERS.map((rps) => redisCostTarget(scenario, rps, compared)),
    ratioTarget(
      `Redis CPU per decision, closed loop, ${scenario}`,
      ratioOf(tollgate.closedLoop.redisUs, reference.closedLoop.redisUs),
      { atMost: CLOSED_REDIS_GOAL },
      `${us(tollgate.closedLoop.redisUs)} against ${us(reference.closedLoop.redisUs)}` +
        commandsFloorNote(
          compared.commands?.closedLoop.redisUs,
          reference.closedLoop.redisUs,
          CLOSED_REDIS_GOAL,
        ),
    ),
    ...P99_TIERS.map((rps) => p99Target(scenario, rps, compared)),
    errorsTarget(scenario, compared),
    ratioTarget(
      `closed-loop throughput, ${scenario}`,
      ratioOf(tollgate.closedLoop.medianRps, reference.closedLoop.medianRps),
      { atLeast: 1 },
      `${rate(Math.round(tollgate.closedLoop.medianRps))} against ${rate(Math.round(reference.closedLoop.medianRps))} req/s, medians`,
    ),
  ];
}

/** Redis's CPU per decision at one constant rate, the median of the rounds', against the reference's. */
function redisCostTarget(scenario: string, rps: number, compared: Compared): Target {
  const mine = tierOf(compared.tollgate, rps)?.cost;
  const theirs = tierOf(compared.reference, rps)?.cost;
  const floor = tierOf(compared.commands, rps)?.cost;
  return ratioTarget(
    `Redis CPU per decision at ${rate(rps)} req/s, ${scenario}`,
    ratioOf(mine?.redisUs, theirs?.redisUs),
    { atMost: TIER_REDIS_GOAL },
    mine && theirs
      ? `${us(mine.redisUs)} against ${us(theirs.redisUs)}; Redis commands per request ${fixed(mine.commandsPerRequest)} against ${fixed(theirs.commandsPerRequest)}` +
          commandsFloorNote(floor?.redisUs, theirs.redisUs, TIER_REDIS_GOAL)
      : 'the tier was not run by both',
  );
}

/** tollgate's p99 at one constant rate against the bare node:http2 floor's in the same rounds. */
function p99Target(scenario: string, rps: number, compared: Compared): Target {
  const mine = tierOf(compared.tollgate, rps);
  const floor = tierOf(compared.floor, rps);
  const roundTrip = tierOf(compared.roundTrip, rps);
  const goal = 1.25;
  return ratioTarget(
    `p99 at ${rate(rps)} req/s ÷ the node:http2 floor's, ${scenario}`,
    ratioOf(mine?.p99, floor?.p99),
    { atMost: goal },
    mine && floor
      ? `${fixed(mine.p99)} against ${fixed(floor.p99)} ms, medians of the rounds' ${roundsOf(mine.p99Rounds)} and ${roundsOf(floor.p99Rounds)}` +
          roundTripNote(roundTrip?.p99, floor.p99, goal)
      : 'the tier was not run by both tollgate and the floor',
  );
}

/** A tier's rounds, in the order they ran, so that a reader sees how far they spread. */
function roundsOf(values: readonly (number | null)[]): string {
  return `(${values.map((value) => (value === null ? 'n/a' : value.toFixed(1))).join(', ')})`;
}

/**
 * The p99 of the floor that makes one Redis round trip per call and decides nothing, against the
 * node:http2 floor's: what any service that asks Redis once per call starts from.
 */
function roundTripNote(
  roundTripMs: number | null | undefined,
  floorMs: number | null,
  goal: number,
): string {
  if (roundTripMs === undefined) return '';
  const ratio = ratioOf(roundTripMs, floorMs);
  return floorNote('the Redis round-trip floor', `${fixed(roundTripMs)} ms`, ratio, goal);
}

/** No failed call at any tier where the reference failed none. */
function errorsTarget(scenario: string, compared: Compared): Target {
  const { reference, tollgate, roundTrip } = compared;
  const clean = reference.tiers.filter((tier) => tier.errors === 0).map((tier) => tier.offeredRps);
  const judged = tollgate.tiers.filter((tier) => clean.includes(tier.offeredRps));
  const errors = judged.reduce((sum, tier) => sum + tier.errors, 0);
  const failing = judged.filter((tier) => tier.errors > 0);
  return {
    name: `errors where the reference has none, ${scenario}`,
    target: '0',
    value: errors,
    met: errors === 0 && judged.length > 0,
    note:
      judged.length === 0
        ? 'no tier where the reference had no errors was run by both'
        : `tiers ${judged.map((tier) => rate(tier.offeredRps)).join(', ')}` +
          (failing.length > 0
            ? `; errors at ${failing.map((tier) => `${rate(tier.offeredRps)} (${tier.errors})`).join(', ')}` +
              lateNote(failing, reference, roundTrip)
            : ''),
  };
}

/**
 * At the tiers where tollgate failed calls: how many calls the reference, and the Redis
 * round-trip floor, answered after tollgate's REDIS_TIMEOUT, end to end, in the same run: the
 * machine held those calls that long, and a bound of that length on the Redis call alone would
 * have failed those of them that waited on Redis (an upper bound).
 */
function lateNote(
  failing: readonly { offeredRps: number }[],
  reference: VersusEntry,
  roundTrip: VersusEntry | undefined,
): string {
  const counts = (entry: VersusEntry | undefined) =>
    failing.map(({ offeredRps }) => tierOf(entry, offeredRps)?.late ?? 'n/a').join(', ');
  return (
    `; answered after ${LATE_MS} ms there, end to end: ` +
    `the reference ${counts(reference)}, the Redis round-trip floor ${counts(roundTrip)}`
  );
}

const us = (value: number | undefined) =>
  value === undefined || !Number.isFinite(value) ? 'n/a' : `${value.toFixed(0)} µs`;
const fixed = (value: number | undefined | null) =>
  value === undefined || value === null || !Number.isFinite(value) ? 'n/a' : value.toFixed(2);
