import type { AdmissionResult } from './admission.js';
import { GOODPUT_MS, LATE_MS } from './ghz.js';
import type { RunResult } from './measure.js';
import { REDIS_COST_TIERS, type BenchResults } from './results.js';
import type { TierTail } from './tailDiagnostics.js';
import type { VersusEntry } from './versus.js';
import { hasClosedLoop } from './versusRounds.js';
import { RLQS_DOMAIN, type RlqsResults } from './rlqs.js';
import {
  BOUND_DOMAIN,
  SHAPES,
  STEADY_FLOOR,
  STEADY_OVER,
  type RlqsBoundResults,
} from './rlqsBound.js';
import { HEADLINE } from './scenarios.js';
import { mean, median } from './stats.js';

/** The Markdown report of one bench run: the targets first, then every table behind them. */
const rps = (value: number | null) =>
  value === null ? 'closed' : Math.round(value).toLocaleString('en-US');
const ms = (value: number | undefined) => (value === undefined ? 'n/a' : value.toFixed(2));
const HEADLINE_NAME = HEADLINE.name;
const mb = (bytes: number) => `${(bytes / 2 ** 20).toFixed(1)} MB`;
const pct = (value: number | null) => (value === null ? 'n/a' : `${Math.round(value)}%`);
const calls = (run: RunResult) => (run.redis ? run.redis.scriptCallsPerRequest.toFixed(2) : 'n/a');
const row = (cells: (string | number)[]) => `| ${cells.join(' | ')} |`;
const header = (cells: string[]) => [row(cells), row(cells.map(() => '---'))];

/** "0", or the failed calls by gRPC status, with their share. */
function errors(run: RunResult): string {
  const failed = Object.entries(run.statusCodes).filter(([code]) => code !== 'OK');
  if (failed.length === 0) return '0';
  const list = failed.map(([code, count]) => `${code} ${count}`).join(', ');
  return `${(100 * run.errorRate).toFixed(2)}% (${list})`;
}

/** Share of tollgate's answers that were OVER_LIMIT. */
function denied(run: RunResult): string {
  if (!run.outcomes) return 'n/a';
  const total = Object.values(run.outcomes).reduce((sum, count) => sum + count, 0);
  return total > 0 ? `${Math.round((100 * (run.outcomes.over_limit ?? 0)) / total)}%` : 'n/a';
}

function admissionVerdict(check: AdmissionResult): string {
  if (check.exact) return 'yes';
  if (check.overAdmitted) return `NO: ${check.allowed - check.limit} over the limit`;
  const failed = Object.values(check.failed).reduce((sum, count) => sum + count, 0);
  // A call that timed out on its way to Redis may still have been counted there.
  return failed >= check.limit - check.allowed
    ? `no: ${check.limit - check.allowed} under, and ${failed} calls failed (a failed call may still have counted)`
    : `no: ${check.limit - check.allowed} under`;
}

/** When `--node` ran the services on another Node than the bench's, which. */
function servicesNode(services: { node?: string }[], benchNode: string): string {
  const versions = [...new Set(services.flatMap((service) => service.node ?? []))];
  const others = versions.filter((version) => version !== benchNode);
  return others.length > 0 ? ` (the services: Node ${versions.join(', ')})` : '';
}

function duration(seconds: number): string {
  const whole = Math.round(seconds);
  return `${Math.floor(whole / 60)}m ${whole % 60}s`;
}

export function markdownReport(results: BenchResults, chartFile: string): string {
  const { machine, plan } = results;
  const lines: string[] = [
    `# tollgate bench: ${results.name}`,
    '',
    `\`${results.command}\`, started ${results.startedAt}, took ${duration(results.durationSeconds)}.`,
  ];
  if (results.mode === 'quick') {
    lines.push(
      '',
      '**Quick mode: short runs that prove the bench works. The numbers are indicative only.**',
    );
  }
  lines.push(
    '',
    `Machine: ${machine.cpuModel}, ${machine.cores} cores, ${machine.memoryGiB} GiB, Linux ${machine.kernel}; ` +
      `Node ${machine.node}${servicesNode(results.services, machine.node)}, Redis ${machine.redis}, ghz ${machine.ghz}. ` +
      `Load average ${machine.loadAverage.start.toFixed(2)} at the start, ${machine.loadAverage.end?.toFixed(2) ?? '?'} at the end. ` +
      'ghz, the services and Redis all share these cores; CPU is in % of one core.',
    '',
    '## Targets',
    '',
    ...targetsTable(results.targets),
    '',
    ...versusSection(results),
    '',
    ...rlqsSection(results.rlqs),
    '',
    ...rlqsBoundSection(results.rlqsBound),
    '',
    `## Throughput`,
    '',
    `Closed loop: ${plan.throughput.concurrency} concurrent calls on ${plan.throughput.connections} connections, no rate limit, ` +
      `${plan.throughput.seconds} s runs after a ${plan.throughput.warmupSeconds} s warm-up, ${plan.throughput.rounds} rounds alternating the services; one descriptor. ` +
      'Rates count successful calls.',
    '',
    ...header([
      'service',
      'runs (req/s)',
      'median req/s',
      '÷ bare',
      'service CPU',
      'Redis CPU',
      'ghz CPU',
      'Redis calls/req',
      'errors',
    ]),
  );
  for (const service of results.throughput.services) {
    const runs = results.throughput.runs.filter((run) => run.service === service.service);
    const redisCpu = runs
      .map((run) => run.cpu.redis)
      .filter((value): value is number => value !== null);
    lines.push(
      row([
        service.service,
        service.runsRps.map(rps).join(', '),
        rps(service.medianRps),
        service.ratioToBare.toFixed(2),
        pct(mean(runs.map((run) => run.cpu.service))),
        redisCpu.length ? pct(mean(redisCpu)) : 'n/a',
        pct(mean(runs.map((run) => run.cpu.ghz))),
        runs[0] ? calls(runs[0]) : 'n/a',
        runs.map(errors).join('; '),
      ]),
    );
  }
  lines.push(
    '',
    '## Latency',
    '',
    `Constant arrival rate (ghz --rps --async, calls time out after ${plan.latency.timeoutMs} ms), one descriptor, ` +
      `${plan.latency.seconds} s per tier after a ${plan.latency.warmupSeconds} s warm-up at the same rate. ` +
      `A tier breaks when it achieves under ${100 * results.breakCriteria.minAchievedRatio}% of the offered rate, ` +
      `errs on over ${100 * results.breakCriteria.maxErrorRate}% of calls, or has p99 over ${results.breakCriteria.maxP99Ms} ms; ` +
      'each service stops one tier past its break.',
    '',
    `![p99 latency against offered rate](${chartFile})`,
    '',
    ...header([
      'service',
      'offered',
      'achieved',
      'p50 ms',
      'p95 ms',
      'p99 ms',
      'max ms',
      'errors',
      'service CPU',
      'Redis CPU',
      'ghz CPU',
      'Redis calls/req',
      'verdict',
    ]),
  );
  for (const series of results.latency) {
    for (const tier of series.tiers) {
      const verdict = tier.reasons.length
        ? `${tier.verdict}: ${tier.reasons.join(', ')}`
        : tier.verdict;
      lines.push(
        row([
          series.service,
          rps(tier.offeredRps),
          rps(tier.achievedRps),
          ms(tier.latencyMs?.p50),
          ms(tier.latencyMs?.p95),
          ms(tier.latencyMs?.p99),
          ms(tier.latencyMs?.max),
          errors(tier),
          pct(tier.cpu.service),
          pct(tier.cpu.redis),
          pct(tier.cpu.ghz),
          calls(tier),
          verdict,
        ]),
      );
    }
  }
  const bare = results.throughput.services.find((service) => service.service === 'bare');
  lines.push(
    '',
    '## Scenarios',
    '',
    `Each scenario on each tollgate: a ${plan.scenarios.throughputSeconds} s closed-loop run (as above; ÷ bare uses the bare median above), ` +
      `then ${plan.scenarios.latencySeconds} s at a constant ${rps(plan.scenarios.rps)} req/s for the latencies. ` +
      '"denied" is the share of OVER_LIMIT answers, from tollgate\'s /metrics.',
    '',
    ...header([
      'scenario',
      'service',
      'closed-loop req/s',
      '÷ bare',
      `achieved at ${rps(plan.scenarios.rps)}`,
      'p50 ms',
      'p95 ms',
      'p99 ms',
      'max ms',
      'errors',
      'denied',
      'Redis calls/req',
      'service CPU',
      'Redis CPU',
      'ghz CPU',
    ]),
  );
  for (const run of results.scenarios) {
    const { throughput: closed, latency: open } = run;
    lines.push(
      row([
        `${run.scenario}: ${run.title}`,
        run.service,
        rps(closed.achievedRps),
        bare ? (closed.achievedRps / bare.medianRps).toFixed(2) : 'n/a',
        rps(open.achievedRps),
        ms(open.latencyMs?.p50),
        ms(open.latencyMs?.p95),
        ms(open.latencyMs?.p99),
        ms(open.latencyMs?.max),
        errors(open),
        denied(open),
        calls(closed),
        pct(open.cpu.service),
        pct(open.cpu.redis),
        pct(open.cpu.ghz),
      ]),
    );
  }
  lines.push(
    '',
    '## No over-admission',
    '',
    `While ghz loads the service, ${plan.admission.requests.toLocaleString('en-US')} requests, ${plan.admission.concurrency} at a time on ` +
      `${plan.admission.channels} connections, go to one key allowed ${results.admission[0]?.limit ?? '?'} a day; the allowed answers are counted by the harness's own gRPC client.`,
    '',
    ...header(['service', 'limit', 'requests', 'allowed', 'denied', 'failed', 'exactly the limit']),
    ...results.admission.map(admissionRow),
    '',
    '## Levers',
    '',
    `Closed loop as above (${plan.variants.seconds} s runs, ${plan.variants.rounds} rounds alternating with the bare server, ` +
      'one descriptor; the scenario is the headline one unless named): the Redis store as shipped, and with one setting changed. tollgate CPU counts every process: ' +
      `a primary and its workers too. This machine has ${machine.cores} cores, which ghz, Redis and tollgate share.`,
    '',
    ...header([
      'variant',
      'scenario',
      'runs (req/s)',
      'median req/s',
      '÷ bare',
      'Redis calls/req',
      'tollgate CPU',
      'Redis CPU',
      'ghz CPU',
    ]),
    (() => {
      const bareRuns = results.variants.runs.filter((run) => run.service === 'bare');
      const bareRps = bareRuns.map((run) => run.achievedRps);
      const middle = median(bareRps);
      return row([
        'bare grpc-js (the ÷ bare of these rows)',
        HEADLINE_NAME,
        bareRps.map(rps).join(', '),
        rps(middle),
        '1.00',
        'n/a',
        pct(mean(bareRuns.map((run) => run.cpu.service))),
        'n/a',
        pct(mean(bareRuns.map((run) => run.cpu.ghz))),
      ]);
    })(),
    ...results.variants.variants.map((variant) => {
      const runs = results.variants.runs.filter((run) => run.service === variant.name);
      const redisCpu = runs.map((run) => run.cpu.redis ?? 0);
      return row([
        variant.label,
        variant.scenario,
        variant.runsRps.map(rps).join(', '),
        rps(variant.medianRps),
        variant.ratioToBare.toFixed(2),
        runs[0] ? calls(runs[0]) : 'n/a',
        pct(variant.cpu.service),
        pct(mean(redisCpu)),
        pct(variant.cpu.ghz),
      ]);
    }),
    '',
    '## Memory',
    '',
    'A steady rate over distinct keys of their own (each key a sliding window of an hour, so none ' +
      "expires during the run). RSS counts all of tollgate's processes; Redis's figures are from INFO.",
    '',
    ...header([
      'service',
      'seconds',
      'offered',
      'achieved',
      'distinct keys',
      'RSS before',
      'RSS after',
      'RSS max',
      'Redis keys gained',
      'Redis used_memory gained',
      'per key',
    ]),
    ...results.memory.map((run) =>
      row([
        run.service,
        run.seconds.toFixed(0),
        rps(run.offeredRps),
        rps(run.achievedRps),
        run.distinctKeys.toLocaleString('en-US'),
        mb(run.rssBytes.before),
        mb(run.rssBytes.after),
        mb(run.rssBytes.max),
        run.redis ? (run.redis.keysAfter - run.redis.keysBefore).toLocaleString('en-US') : 'n/a',
        run.redis ? mb(run.redis.usedBytesAfter - run.redis.usedBytesBefore) : 'n/a',
        run.redis
          ? `${Math.round(run.redis.bytesPerKey)} B`
          : `${Math.round((run.rssBytes.after - run.rssBytes.before) / Math.min(run.requests, run.distinctKeys))} B of RSS`,
      ]),
    ),
    '',
    ...results.memory.flatMap((run) => [
      `RSS of ${run.service} over the run: ` +
        run.samples.map((sample) => `${sample.atSeconds} s ${mb(sample.rssBytes)}`).join(', '),
      '',
    ]),
  );
  return lines.join('\n');
}

/** The lower constant rate whose Redis CPU per decision the targets judge, beside the cost tier's. */
const REDIS_LOW_RPS = 1_000;

/** The report of `--versus`: its targets, then the section. */
export function versusReport(
  results: Pick<
    BenchResults,
    | 'name'
    | 'mode'
    | 'command'
    | 'startedAt'
    | 'durationSeconds'
    | 'machine'
    | 'plan'
    | 'versus'
    | 'targets'
  >,
): string {
  const { machine } = results;
  return [
    `# tollgate against envoyproxy/ratelimit: ${results.name}`,
    '',
    `\`${results.command}\`, started ${results.startedAt}, took ${duration(results.durationSeconds)}. ` +
      `Machine: ${machine.cpuModel}, ${machine.cores} cores; Node ${machine.node}${servicesNode(results.versus.services, machine.node)}, Redis ${machine.redis}, ghz ${machine.ghz}; ` +
      `load average ${machine.loadAverage.start.toFixed(2)} at the start.`,
    '',
    ...targetsTable(results.targets),
    '',
    ...versusSection(results),
    '',
  ].join('\n');
}

/** tollgate against envoyproxy/ratelimit, each figure also as a ratio to the reference's. */
function versusSection(results: Pick<BenchResults, 'versus' | 'plan'>): string[] {
  const { versus, plan } = results;
  const lines = [
    '## Against envoyproxy/ratelimit',
    '',
    `The reference's own server and tollgate, one after another on the same Redis and rules; ` +
      `${plan.versus.concurrency} concurrent calls on ${plan.versus.connections} connections. ` +
      `Closed loop: ${plan.versus.closedSeconds} s runs, ${plan.versus.rounds} rounds alternating the services. ` +
      `Constant rates: ${plan.versus.tierSeconds} s runs, ${plan.versus.tierRounds} rounds per tier alternating the services (A B C, A B C), ` +
      'each service up to one tier past its break (over 1% errors, or under 95% of the offered rate, over its rounds); ' +
      "p50 and p99 are the medians of the rounds', errors and goodput count every call of every round. " +
      `Goodput is the share of calls answered OK within ${GOODPUT_MS} ms, Envoy's default timeout for a rate-limit call, counted call by call; a failed call is never in time. ` +
      `CPU per decision is from /proc, the median of the rounds' at ${plan.versus.costRps} req/s, and in the closed loop; Redis commands per request, and the time Redis spent executing them, from INFO commandstats, a script's inner commands included; the rest of Redis's CPU reads, parses and answers the calls. ` +
      "The targets compare tollgate with fixed windows, the reference's semantics, with the reference, and its p99 with the node:http2 floor's. " +
      'Four floors decide nothing: a bare grpc-js server, up to the cost tier; ' +
      "Node's http2 module with the gRPC framing written by hand (bare-http2), at every tier; " +
      'the same making one Redis round trip per call, an EVALSHA of `return 1` on the same Redis (bare-http2-redis), at every tier; ' +
      "and the same making one FCALL per call of exactly an exact decision's commands on hash counters, TIME then HMGET and HSET per descriptor (bare-http2-commands), " +
      `at ${REDIS_COST_TIERS.map(rps).join(' and ')} req/s and in the closed loop: the least Redis spends on any such design.`,
    '',
    ...header(['service', 'REDIS_TIMEOUT', 'Node']),
    ...versus.services.map((service) =>
      row([service.title, service.redisTimeout, service.node ?? '— (Go)']),
    ),
  ];
  if (versus.tailDiagnostics) {
    lines.push(
      '',
      `With \`--tail-diagnostics\`: ${versus.tailDiagnostics} ran with scripts/loop-delay.mjs loaded, which times its event loop and GC pauses at each constant rate (the tables under each scenario). ` +
        "Its 1 ms timers cost that process CPU and wake-ups, so this run's figures for it are not a normal run's.",
    );
  }
  for (const { scenario, title, entries } of versus.scenarios) {
    const reference = entries.find((entry) => entry.service === 'reference');
    const ratio = (mine: number | undefined | null, theirs: number | undefined | null) =>
      mine === undefined || mine === null || !theirs ? '' : ` (${(mine / theirs).toFixed(2)}×)`;
    const micros = (mine: number | undefined, theirs: number | undefined) =>
      mine === undefined || !Number.isFinite(mine)
        ? 'n/a'
        : `${mine.toFixed(0)}${ratio(mine, theirs)}`;
    const redisAt = (entry: VersusEntry, at: number) =>
      entry.tiers.find((tier) => tier.offeredRps === at)?.cost?.redisUs;
    lines.push(
      '',
      `### ${title}`,
      '',
      ...header([
        'service',
        'closed loop req/s',
        `service CPU µs/decision at ${rps(plan.versus.costRps)} req/s`,
        `Redis CPU µs/decision at ${rps(plan.versus.costRps)} req/s`,
        'of which executing commands',
        `Redis CPU µs/decision at ${rps(REDIS_LOW_RPS)} req/s`,
        'Redis CPU µs/decision, closed loop',
        'Redis commands/request',
        'script calls/request',
        'script calls/request, closed loop',
      ]),
    );
    for (const entry of entries) {
      const cost = entry.cost;
      const none = entry.floor ? '—' : 'n/a';
      // The plain floors have no Redis; the one with a round trip has no closed loop.
      const redis = cost && entry.floor !== 'no-redis';
      const closed = hasClosedLoop(entry);
      lines.push(
        row([
          entry.service,
          !closed
            ? none
            : `${rps(entry.closedLoop.medianRps)}${ratio(entry.closedLoop.medianRps, reference?.closedLoop.medianRps)}`,
          cost ? micros(cost.serviceUs, reference?.cost?.serviceUs) : 'n/a',
          redis ? micros(cost.redisUs, reference?.cost?.redisUs) : none,
          redis ? `${(cost.redisExecutionUs ?? NaN).toFixed(1)}` : none,
          entry.floor === 'no-redis'
            ? none
            : micros(redisAt(entry, REDIS_LOW_RPS), reference && redisAt(reference, REDIS_LOW_RPS)),
          !closed ? none : micros(entry.closedLoop.redisUs, reference?.closedLoop.redisUs),
          redis ? cost.commandsPerRequest.toFixed(2) : none,
          redis ? cost.scriptCallsPerRequest.toFixed(2) : none,
          !closed ? none : entry.closedLoop.scriptCallsPerRequest.toFixed(2),
        ]),
      );
    }
    const rates = [...new Set(entries.flatMap((entry) => entry.tiers.map((t) => t.offeredRps)))];
    lines.push(
      '',
      `p50 / p99 in ms, goodput within ${GOODPUT_MS} ms, errors, and calls answered after ${LATE_MS} ms end to end (tollgate's REDIS_TIMEOUT bounds the Redis call alone), at constant rates (${scenario}):`,
      '',
      ...header(['service', ...rates.map((r) => `${rps(r)} req/s`)]),
    );
    for (const entry of entries) {
      lines.push(
        row([
          entry.service,
          ...rates.map((r) => {
            const tier = entry.tiers.find((t) => t.offeredRps === r);
            if (!tier) return '';
            const ms = (v: number | null) => (v === null ? 'n/a' : v.toFixed(2));
            const mark = tier.verdict === 'ok' ? '' : ` (${tier.verdict})`;
            const late = tier.late ? `, ${tier.late} after ${LATE_MS} ms` : '';
            return `${ms(tier.p50)} / ${ms(tier.p99)}, ${goodput(tier.goodput)}, ${tier.errors} errors${late}${mark}`;
          }),
        ]),
      );
    }
    lines.push(...tailTable(scenario, entries));
  }
  if (versus.admission.length > 0) {
    lines.push(
      '',
      '### No over-admission',
      '',
      `While ghz loads the service, concurrent requests go to one key of its own allowed ${versus.admission[0]!.limit} a day.`,
      '',
      ...header([
        'service',
        'limit',
        'requests',
        'allowed',
        'denied',
        'failed',
        'exactly the limit',
      ]),
      ...versus.admission.map(admissionRow),
    );
  }
  return lines;
}

/**
 * With `--tail-diagnostics`: the watched service's event loop delay and GC pauses at each
 * constant rate; nothing otherwise.
 */
function tailTable(scenario: string, entries: readonly VersusEntry[]): string[] {
  const lines: string[] = [];
  for (const entry of entries) {
    const tiers = entry.tiers.filter(
      (tier): tier is typeof tier & { tail: TierTail } => !!tier.tail,
    );
    if (tiers.length === 0) continue;
    lines.push(
      '',
      `${entry.service}'s event loop delay (1 ms resolution; p50 and p99 the medians of the rounds', max the worst) and GC pauses (over all the rounds) at constant rates (${scenario}):`,
      '',
      ...header([
        'offered req/s',
        'loop delay p50 / p99 / max ms',
        'GC pauses',
        'GC total ms',
        'GC max ms',
        'by kind: pauses, total / max ms',
      ]),
      ...tiers.map(({ offeredRps, tail }) =>
        row([
          rps(offeredRps),
          [tail.loopDelayMs.p50, tail.loopDelayMs.p99, tail.loopDelayMs.max]
            .map((value) => value.toFixed(2))
            .join(' / '),
          tail.gc.count,
          tail.gc.totalMs.toFixed(1),
          tail.gc.maxMs.toFixed(2),
          Object.entries(tail.gc.byKind)
            .map(
              ([kind, k]) => `${kind} ${k.count}, ${k.totalMs.toFixed(1)} / ${k.maxMs.toFixed(2)}`,
            )
            .join('; ') || '—',
        ]),
      ),
    );
  }
  return lines;
}

/** Goodput as a percentage, with the decimals that tell 99.99% from 100%. */
function goodput(share: number): string {
  return `${(100 * share).toFixed(2)}%`;
}

function admissionRow(check: AdmissionResult): string {
  return row([
    check.service,
    check.limit,
    check.requests,
    check.allowed,
    check.denied,
    Object.entries(check.failed)
      .map(([code, count]) => `${code} ${count}`)
      .join(', ') || '0',
    admissionVerdict(check),
  ]);
}

/** A ratio as `0.93×`, a count as a whole number. */
function measured(target: BenchResults['targets'][number]): string {
  if (target.value === null) return 'n/a';
  if (target.target.includes('×')) return `${target.value.toFixed(2)}×`;
  return Number.isInteger(target.value) ? String(target.value) : target.value.toFixed(2);
}

function targetsTable(targets: BenchResults['targets']): string[] {
  return [
    ...header(['target', 'goal', 'measured', 'met or missed', 'how']),
    ...targets.map((target) =>
      row([
        target.name,
        target.target,
        measured(target),
        target.met ? 'met' : 'missed',
        target.note,
      ]),
    ),
  ];
}

const cpuPer1000 = (value: number | null) =>
  value === null || !Number.isFinite(value) ? 'n/a' : `${value.toFixed(1)} ms`;

/**
 * RLQS against classic checks (bench/rlqs.ts): tollgate's CPU per 1,000 client requests under
 * RLQS, beside its CPU per 1,000 ShouldRateLimit checks, in the same rounds.
 */
export function rlqsSection(rlqs: RlqsResults): string[] {
  const { plan } = rlqs;
  const lines = [
    '## RLQS against classic checks',
    '',
    `One tollgate (fixed windows, \`REDIS_TIMEOUT=${rlqs.service.settings.REDIS_TIMEOUT ?? '?'}\`) on the bench's Redis, rules of domain \`${RLQS_DOMAIN}\` ` +
      `with a tenant rule of ${plan.limitPerMinute.toLocaleString('en-US')} requests a minute per tenant. ` +
      `RLQS: ${plan.clients} simulated Envoys (test/rlqs/sim), one \`StreamRateLimitQuotas\` stream each, ` +
      `each with one bucket \`{tenant: tN}\` of ${plan.tenants} tenants, deciding ${plan.clientRps} requests a second ` +
      `from tollgate's assignments and reporting every ${plan.reportingIntervalMs} ms; client requests are the ` +
      "admitted and denied totals the simulator reports. Classic: ghz's `ShouldRateLimit` checks at " +
      `${plan.classicRps.toLocaleString('en-US')} req/s (50 concurrent calls on 4 connections), one descriptor ` +
      `\`{tenant: cN}\` on ${plan.tenants} tenants of their own. ${plan.rounds} round(s) of ${plan.seconds} s per side, ` +
      `alternating, after a ${plan.warmupSeconds} s warm-up of each. CPU is utime + stime from /proc over each run; ` +
      'the medians of the rounds.',
    '',
    ...header([
      'side',
      'client requests/s',
      'tollgate CPU per 1,000 requests',
      'Redis CPU per 1,000 requests',
      'rounds (tollgate CPU per 1,000)',
    ]),
  ];
  for (const summary of [rlqs.rlqs, rlqs.classic]) {
    const runs = rlqs.runs.filter((run) => run.side === summary.side);
    lines.push(
      row([
        summary.side === 'rlqs' ? 'RLQS streams' : 'classic ShouldRateLimit',
        rps(summary.requestsPerSecond),
        cpuPer1000(summary.serviceMsPer1000),
        cpuPer1000(summary.redisMsPer1000),
        runs.map((run) => cpuPer1000(run.serviceMsPer1000)).join(', '),
      ]),
    );
  }
  lines.push(
    '',
    `RLQS over classic, tollgate's CPU per 1,000 requests: ${rlqs.ratio === null ? 'n/a' : `${rlqs.ratio.toFixed(3)}×`}. ` +
      `With no load, the same tollgate spent ${rlqs.idleMsPerSecond.toFixed(1)} ms of CPU a second ` +
      `(over ${plan.idleSeconds} s), which both sides include.`,
    '',
    ...header([
      'run',
      'seconds',
      'requests',
      'admitted',
      'denied',
      'errors',
      'tollgate CPU s',
      'Redis CPU s',
      'error codes',
      'reports (immediate, periodic, on assignment)',
      'assignments (changed)',
      'report p99 ms',
    ]),
  );
  for (const run of rlqs.runs) {
    lines.push(
      row([
        `${run.side} ${run.round}`,
        run.seconds.toFixed(1),
        run.requests.toLocaleString('en-US'),
        run.admitted.toLocaleString('en-US'),
        run.denied.toLocaleString('en-US'),
        run.errors,
        run.serviceCpuSeconds.toFixed(2),
        run.redisCpuSeconds?.toFixed(2) ?? 'n/a',
        Object.entries(run.codes)
          .filter(([code]) => code !== 'OK')
          .map(([code, count]) => `${code} ${count}`)
          .join(', '),
        run.reports === undefined
          ? ''
          : `${run.reports.toLocaleString('en-US')} (${run.reportsBy?.immediate ?? '?'}, ${run.reportsBy?.periodic ?? '?'}, ${run.reportsBy?.onAssignment ?? '?'})`,
        run.assignments === undefined
          ? ''
          : `${run.assignments.toLocaleString('en-US')} (${run.assignmentsChanged ?? '?'})`,
        run.reportLatencyP99Ms === undefined ? '' : ms(run.reportLatencyP99Ms),
      ]),
    );
  }
  const messages = rlqs.runs.flatMap((run) =>
    (run.errorMessages ?? []).map((message) => `- ${run.side} ${run.round}: ${message}`),
  );
  if (messages.length > 0)
    lines.push('', 'Stream errors (the first of each run):', '', ...messages);
  return lines;
}

/** The report of `--rlqs`: only the RLQS row. */
export function rlqsReport(
  results: Pick<
    BenchResults,
    'name' | 'mode' | 'command' | 'startedAt' | 'durationSeconds' | 'machine' | 'rlqs'
  >,
): string {
  const { machine } = results;
  return [
    `# tollgate under RLQS against classic checks: ${results.name}`,
    '',
    `\`${results.command}\`, started ${results.startedAt}, took ${duration(results.durationSeconds)}. ` +
      `Machine: ${machine.cpuModel}, ${machine.cores} cores; Node ${machine.node}` +
      `${servicesNode([results.rlqs.service], machine.node)}, Redis ${machine.redis}, ghz ${machine.ghz}; ` +
      `load average ${machine.loadAverage.start.toFixed(2)} at the start, ${machine.loadAverage.end?.toFixed(2) ?? '?'} at the end. ` +
      'The simulator, ghz, tollgate and Redis share these cores.',
    ...(results.mode === 'quick'
      ? [
          '',
          '**Quick mode: short runs that prove the row works. The numbers are indicative only.**',
        ]
      : []),
    '',
    ...rlqsSection(results.rlqs),
    '',
  ].join('\n');
}

const ofL = (value: number | undefined) =>
  value === undefined || !Number.isFinite(value) ? 'n/a' : `${value.toFixed(3)} L`;

/**
 * RLQS's over-admission bound (bench/rlqsBound.ts): admitted requests per epoch-aligned window
 * against the rule's L, per shape of Envoy's reporting and scenario.
 */
export function rlqsBoundSection(bound: RlqsBoundResults): string[] {
  const { plan } = bound;
  const seconds = plan.windowMs / 1000;
  const lines = [
    "## RLQS's over-admission bound",
    '',
    `One tollgate on the bench's Redis, a tenant rule of L = ${plan.limit.toLocaleString('en-US')} requests per ${seconds} s fixed window ` +
      `(domain \`${BOUND_DOMAIN}\`). Simulated Envoys (test/rlqs/sim) on one bucket each, ` +
      "with the sample config's fallbacks (a no-assignment token bucket of 5 a second, " +
      "expired assignments reused for 300 s) unless the scenario says Envoy's defaults. Demand is three times the rule's rate in every scenario. " +
      "In each shape of Envoy's reporting, one after the other, the scenarios run at once, on tenants of their own, and every client joins a little into the same epoch-aligned window: " +
      `that first whole window is the join, then ${plan.warmWindows} window(s) of warm-up (the join's included) and ${plan.measuredWindows} measured. ` +
      "Admitted counts the clients' admitted requests per window, and in the shared scenario the classic " +
      `\`ShouldRateLimit\` checks answered OK too (${plan.classicRps} a second, counted by the window they were sent in). ` +
      "Jain's index is over each client's admitted / (admitted + denied) in the measured windows. " +
      `The bound: ${STEADY_FLOOR}-${1 + STEADY_OVER} L in every measured window, and on the join at most L plus one assignment's worth ` +
      "(the tokens of the clients' first assignments, summed).",
  ];
  for (const name of plan.shapes) {
    const shape = SHAPES.find((known) => known.name === name);
    const entries = bound.entries.filter((entry) => entry.shape === name);
    if (shape === undefined || entries.length === 0) continue;
    lines.push('', `### ${shape.title}`, '', ...shapeTable(entries), ...shapeDetail(entries, plan));
  }
  const messages = bound.entries.flatMap((entry) =>
    entry.streamErrorMessages.map((message) => `- ${entry.shape}, ${entry.scenario}: ${message}`),
  );
  if (messages.length > 0) lines.push('', 'Stream errors (the first of each):', '', ...messages);
  return lines;
}

function shapeTable(entries: RlqsBoundResults['entries']): string[] {
  const lines = header([
    'scenario',
    'clients',
    'demand/s',
    'min / max admitted/L',
    'mean admitted/L',
    "join admitted/L (one assignment's worth)",
    "Jain's index",
    'assignments changed',
    'report p50 / p99 ms',
    'bound',
  ]);
  for (const entry of entries) {
    const met = entry.steadyMet && entry.joinMet;
    lines.push(
      row([
        entry.title,
        entry.clients,
        Math.round(entry.demandRps).toLocaleString('en-US'),
        `${ofL(entry.minOfLimit)} / ${ofL(entry.maxOfLimit)}`,
        ofL(entry.meanOfLimit),
        `${ofL(entry.join?.ofLimit)} (${entry.firstAssignmentTokens})`,
        Number.isFinite(entry.jain) ? entry.jain.toFixed(3) : 'n/a',
        entry.assignmentsChanged.toLocaleString('en-US'),
        `${ms(entry.reportLatencyMs.p50)} / ${ms(entry.reportLatencyMs.p99)}`,
        met
          ? 'met'
          : `**missed**${entry.steadyMet ? '' : ' (steady)'}${entry.joinMet ? '' : ' (join)'}`,
      ]),
    );
  }
  return lines;
}

function shapeDetail(
  entries: RlqsBoundResults['entries'],
  plan: RlqsBoundResults['plan'],
): string[] {
  const lines: string[] = [];
  for (const entry of entries.filter((e) => e.classicSent !== undefined)) {
    const classic = entry.measured.map((w) => w.classicAllowed);
    lines.push(
      '',
      `${entry.title}: the classic checks were allowed ${classic.join(', ')} times in the measured windows ` +
        `(${entry.classicSent!.toLocaleString('en-US')} sent, ${entry.classicFailed} failed), ` +
        `the RLQS clients admitted ${entry.measured.map((w) => w.admitted).join(', ')}.`,
    );
  }
  lines.push(
    '',
    'Admitted / L per measured window:',
    '',
    ...header(['scenario', ...Array.from({ length: plan.measuredWindows }, (_, i) => `${i + 1}`)]),
    ...entries.map((entry) =>
      row([entry.title, ...entry.measured.map((w) => w.ofLimit.toFixed(3))]),
    ),
  );
  return lines;
}

/** The report of `--rlqs-bound`: only RLQS's over-admission bound. */
export function rlqsBoundReport(
  results: Pick<
    BenchResults,
    'name' | 'mode' | 'command' | 'startedAt' | 'durationSeconds' | 'machine'
  > & { rlqsBound: RlqsBoundResults },
): string {
  const { machine } = results;
  return [
    `# RLQS's over-admission bound: ${results.name}`,
    '',
    `\`${results.command}\`, started ${results.startedAt}, took ${duration(results.durationSeconds)}. ` +
      `Machine: ${machine.cpuModel}, ${machine.cores} cores; Node ${machine.node}` +
      `${servicesNode([results.rlqsBound.service], machine.node)}, Redis ${machine.redis}; ` +
      `load average ${machine.loadAverage.start.toFixed(2)} at the start, ${machine.loadAverage.end?.toFixed(2) ?? '?'} at the end. ` +
      'The simulators, tollgate and Redis share these cores.',
    ...(results.mode === 'quick'
      ? [
          '',
          '**Quick mode: a smoke run on short windows that proves the mode works. The numbers judge nothing.**',
        ]
      : []),
    '',
    ...rlqsBoundSection(results.rlqsBound),
    '',
  ].join('\n');
}
