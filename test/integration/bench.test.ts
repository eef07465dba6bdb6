import { readFileSync } from 'node:fs';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { latencyChart } from '../../bench/chart.js';
import type { RunResult } from '../../bench/measure.js';
import { parseStat, treeCpuSeconds, treeRssBytes } from '../../bench/procstat.js';
import { summarizeProfile } from '../../bench/profile.js';
import { allCalls, executionMicros } from '../../bench/probes.js';
import { statCounts } from '../../bench/perf.js';
import { breakReasons } from '../../bench/series.js';
import { RULES_YAML, SCENARIOS } from '../../bench/scenarios.js';
import { versusTargets } from '../../bench/results.js';
import type { VersusEntry, VersusResults } from '../../bench/versus.js';
import { VERSUS_RULES_YAML, VERSUS_SCENARIOS } from '../../bench/versusScenarios.js';
import { startTollgate, type Tollgate } from '../support/tollgate.js';

// The bench itself runs as `npm run bench -- --quick` (CI) since it needs ghz and takes a minute.
// These are the parts of it that can break silently and cheaply: the rules it writes, the
// decisions its scenarios expect, and the judgements it prints. They take well under a second.

let tollgate: Tollgate;

beforeAll(async () => {
  tollgate = await startTollgate({ rules: RULES_YAML });
});

afterAll(async () => {
  await tollgate.stop();
});

/** ghz fills in the template actions; any value does here. */
function concrete(request: object): object {
  return JSON.parse(JSON.stringify(request).replace(/\{\{[^}]*\}\}/g, '7')) as object;
}

describe("the bench's rules and scenarios", () => {
  it('allows every scenario but the abusive one, and denies that one past its limit', async () => {
    for (const scenario of SCENARIOS) {
      const request = concrete(scenario.request);
      const answers = [];
      for (let i = 0; i < 20; i += 1) answers.push((await tollgate.check(request)).overall_code);
      if (scenario.name === 'abusive-tenant')
        expect(answers.slice(-5)).toEqual(Array(5).fill('OVER_LIMIT'));
      else expect(answers, scenario.name).toEqual(Array(20).fill('OK'));
    }
  });
});

describe('the comparison with envoyproxy/ratelimit', () => {
  it('uses rules without tollgate-only keys, under which its scenarios are allowed', async () => {
    expect(VERSUS_RULES_YAML).not.toMatch(/algorithm|window:|burst|overdraw/);
    const versus = await startTollgate({
      rules: VERSUS_RULES_YAML,
      env: { DEFAULT_ALGORITHM: 'fixed_window' },
    });
    try {
      for (const scenario of VERSUS_SCENARIOS) {
        const answer = await versus.check(scenario.request);
        expect(answer.overall_code, scenario.name).toBe('OK');
        expect(
          answer.statuses?.every((status) => status.current_limit),
          scenario.name,
        ).toBe(true);
      }
    } finally {
      await versus.stop();
    }
  });

  const cost = (offeredRps: number, serviceUs: number, redisUs: number) => ({
    offeredRps,
    serviceUs,
    redisUs,
    redisExecutionUs: 3,
    commandsPerRequest: 2,
    scriptCallsPerRequest: 1,
  });
  const entry = (service: string, fields: Partial<VersusEntry>): VersusEntry => ({
    service,
    closedLoop: {
      runsRps: [1_000],
      medianRps: 1_000,
      serviceUs: 180,
      redisUs: 20,
      scriptCallsPerRequest: 1,
    },
    cost: cost(3_000, 200, 30),
    tiers: [1_000, 2_000, 3_000, 5_000].map((offeredRps) => ({
      offeredRps,
      achievedRps: offeredRps,
      p50: 0.5,
      p99: 2,
      p99Rounds: [2, 1.5, 3],
      requests: 3 * offeredRps,
      errors: 0,
      errorRate: 0,
      goodput: 0.999,
      cost: cost(offeredRps, 200, 30),
      verdict: 'ok' as const,
    })),
    breakRps: null,
    ...fields,
  });

  it('judges tollgate with fixed windows against the reference and its p99 against the node:http2 floor', () => {
    const reference = entry('reference', { breakRps: 5_000 });
    reference.tiers[3]!.errors = 40; // the reference fails at 5,000: tollgate's errors there are not judged
    const tollgate = entry('tollgate-fixed', {
      closedLoop: {
        runsRps: [1_100],
        medianRps: 1_100,
        serviceUs: 150,
        redisUs: 12,
        scriptCallsPerRequest: 1,
      },
      cost: cost(3_000, 150, 33),
    });
    tollgate.tiers[0]!.cost = cost(1_000, 150, 36); // 1.2× the reference's Redis CPU: met
    tollgate.tiers[2]!.cost = cost(3_000, 150, 37.5); // 1.25×: missed
    tollgate.tiers[1]!.p99 = 3; // 1.5× the floor's at 2,000 req/s
    tollgate.tiers[2]!.p99 = 2.5; // 1.25×, exactly the bar
    tollgate.tiers[3]!.errors = 9;
    // The floor is the bar, whatever the reference's p99: a tollgate as slow as the reference misses.
    const floor = entry('bare-http2', { floor: 'no-redis' });
    reference.tiers[1]!.p99 = 3;
    const admission = (service: string, allowed: number) => ({
      service,
      limit: 1_000,
      requests: 4_000,
      concurrency: 200,
      channels: 4,
      allowed,
      denied: 4_000 - allowed,
      failed: {},
      exact: allowed === 1_000,
      overAdmitted: allowed > 1_000,
    });
    const results: VersusResults = {
      services: [],
      runs: [],
      costRps: 3_000,
      scenarios: [{ scenario: 'one-descriptor', title: '', entries: [reference, tollgate, floor] }],
      admission: [admission('reference', 1_000), admission('tollgate-fixed', 1_000)],
    };
    const judged = versusTargets(results).map(({ name, target, value, met }) => ({
      name,
      target,
      value,
      met,
    }));
    expect(judged).toEqual([
      {
        name: 'service CPU per decision at 3,000 req/s, one-descriptor',
        target: '≤ 0.80×',
        value: 0.75,
        met: true,
      },
      {
        name: 'Redis CPU per decision at 1,000 req/s, one-descriptor',
        target: '≤ 1.20×',
        value: 1.2,
        met: true,
      },
      {
        name: 'Redis CPU per decision at 3,000 req/s, one-descriptor',
        target: '≤ 1.20×',
        value: 1.25,
        met: false,
      },
      {
        name: 'Redis CPU per decision, closed loop, one-descriptor',
        target: '≤ 0.60×',
        value: 0.6,
        met: true,
      },
      {
        name: "p99 at 1,000 req/s ÷ the node:http2 floor's, one-descriptor",
        target: '≤ 1.25×',
        value: 1,
        met: true,
      },
      {
        name: "p99 at 2,000 req/s ÷ the node:http2 floor's, one-descriptor",
        target: '≤ 1.25×',
        value: 1.5,
        met: false,
      },
      {
        name: "p99 at 3,000 req/s ÷ the node:http2 floor's, one-descriptor",
        target: '≤ 1.25×',
        value: 1.25,
        met: true,
      },
      {
        name: 'errors where the reference has none, one-descriptor',
        target: '0',
        value: 0,
        met: true,
      },
      { name: 'closed-loop throughput, one-descriptor', target: '≥ 1.00×', value: 1.1, met: true },
      {
        name: 'exactness: requests allowed on one key under load',
        target: '= the limit, 1000',
        value: 1_000,
        met: true,
      },
    ]);
    // No target on goodput any more: a tollgate answering fewer calls in time still meets them all.
    tollgate.tiers[0]!.goodput = 0.5;
    expect(versusTargets(results).filter((target) => /goodput/.test(target.name))).toEqual([]);
    tollgate.tiers[1]!.errors = 1;
    expect(versusTargets(results)[7]).toMatchObject({ value: 1, met: false });
    results.admission[1] = admission('tollgate-fixed', 1_001);
    expect(versusTargets(results)[9]).toMatchObject({ value: 1_001, met: false });
    // Without the floor in the run, the p99 targets are missed, not passed.
    results.scenarios[0]!.entries = [reference, tollgate];
    expect(versusTargets(results)[4]).toMatchObject({ value: null, met: false });
  });

  it("notes on each Redis-CPU target the commands floor's own ratio, and when it misses the target itself", () => {
    const reference = entry('reference', {});
    const tollgate = entry('tollgate-fixed', {});
    const commands = entry('bare-http2-commands', {
      floor: 'exact-commands',
      closedLoop: {
        runsRps: [2_000],
        medianRps: 2_000,
        serviceUs: 90,
        redisUs: 14,
        scriptCallsPerRequest: 1,
      },
      tiers: [1_000, 3_000].map((offeredRps) => ({
        ...entry('', {}).tiers[0]!,
        offeredRps,
        cost: cost(offeredRps, 90, offeredRps === 1_000 ? 33 : 39),
      })),
    });
    const results: VersusResults = {
      services: [],
      runs: [],
      costRps: 3_000,
      scenarios: [
        { scenario: 'one-descriptor', title: '', entries: [reference, tollgate, commands] },
      ],
      admission: [],
    };
    const notes = Object.fromEntries(
      versusTargets(results)
        .filter((target) => /^Redis CPU/.test(target.name))
        .map((target) => [target.name, target.note]),
    );
    expect(notes).toEqual({
      'Redis CPU per decision at 1,000 req/s, one-descriptor':
        '30 µs against 30 µs; Redis commands per request 2.00 against 2.00; the commands floor: 33 µs, 1.10×',
      'Redis CPU per decision at 3,000 req/s, one-descriptor':
        '30 µs against 30 µs; Redis commands per request 2.00 against 2.00; the commands floor: 39 µs, 1.30×, over the target itself',
      'Redis CPU per decision, closed loop, one-descriptor':
        '20 µs against 20 µs; the commands floor: 14 µs, 0.70×, over the target itself',
    });
    // Without the floor in the run, the notes say nothing of it.
    results.scenarios[0]!.entries = [reference, tollgate];
    expect(versusTargets(results).every((target) => !/commands floor/.test(target.note))).toBe(
      true,
    );
  });
});

describe("the bench's judgements", () => {
  const run = (over: Partial<RunResult>): RunResult => ({
    service: 'redis',
    scenario: 'one-descriptor',
    offeredRps: 5_000,
    achievedRps: 5_000,
    requests: 50_000,
    seconds: 10,
    latencyMs: { p50: 0.4, p95: 0.9, p99: 1.5, max: 4, mean: 0.5 },
    statusCodes: { OK: 50_000 },
    errors: {},
    errorRate: 0,
    answeredInTime: 50_000,
    cpu: { service: 60, redis: 10, ghz: 70 },
    redis: null,
    outcomes: { ok: 50_000 },
    ...over,
  });

  it('breaks a tier on rate, errors or p99, and names each reason', () => {
    expect(breakReasons(run({}))).toEqual([]);
    expect(breakReasons(run({ achievedRps: 4_000, errorRate: 0.2, latencyMs: null }))).toEqual([
      'achieved 80% of offered',
      'errors 20.0%',
      'no call succeeded',
    ]);
    expect(breakReasons(run({ latencyMs: { p50: 1, p95: 2, p99: 2.5, max: 9, mean: 1 } }))).toEqual(
      ['p99 2.50 ms'],
    );
  });

  it('reads CPU from /proc, whatever the command name holds', () => {
    const stat = parseStat('42 (a (b) c) S 7 42 42 0 -1 4194560 1 0 0 0 150 50 30 20 20 0');
    expect(stat).toEqual({ ppid: 7, cpuSeconds: 2, childrenCpuSeconds: 0.5 });
    expect(treeCpuSeconds(process.pid)).toBeGreaterThan(0);
  });

  it('splits a CPU profile by owner, leaving idle time out', () => {
    const frame = (functionName: string, url: string) => ({ functionName, url, lineNumber: 0 });
    const summary = summarizeProfile({
      nodes: [
        { id: 1, callFrame: frame('(idle)', '') },
        { id: 2, callFrame: frame('decide', 'file:///srv/tollgate/dist/limiter.js') },
        { id: 3, callFrame: frame('(garbage collector)', '') },
        { id: 4, callFrame: frame('respond', 'node:internal/http2/core') },
      ],
      samples: [1, 2, 2, 3, 4, 1],
      timeDeltas: [500, 300, 300, 200, 200, 500],
    });
    expect(summary.busySeconds).toBeCloseTo(0.001);
    expect(summary.owners).toEqual([
      { owner: "tollgate's code", percent: 60 },
      { owner: 'garbage collection', percent: 20 },
      { owner: "Node's http2", percent: 20 },
    ]);
    expect(summary.functions[0]).toEqual({ name: 'decide dist/limiter.js:1', percent: 60 });
  });

  it('counts the time Redis spent executing commands once, a script with its inner calls', () => {
    const scripted = { evalsha: 10, 'evalsha.usec': 120, hset: 20, 'hset.usec': 40 };
    expect(allCalls(scripted)).toBe(30);
    expect(executionMicros(scripted)).toBe(120);
    const plain = { incrby: 10, 'incrby.usec': 15, expire: 10, 'expire.usec': 9 };
    expect(allCalls(plain)).toBe(20);
    expect(executionMicros(plain)).toBe(24);
  });

  it("reads perf stat's CPU time and context switches", () => {
    const text = [
      '',
      " Performance counter stats for process id '17054':",
      '',
      '          6,015.47 msec task-clock                       #    0.752 CPUs utilized',
      '           167,683      context-switches                 #   27.875 K/sec',
      '',
      '       8.001727600 seconds time elapsed',
    ].join('\n');
    expect(statCounts(text)).toEqual({ taskClockMs: 6015.47, contextSwitches: 167683 });
    expect(() => statCounts('<not counted> msec task-clock')).toThrow(/task-clock/);
  });

  it('names who asked for each socket write', () => {
    const frame = (functionName: string, url: string) => ({ functionName, url, lineNumber: 0 });
    const summary = summarizeProfile({
      nodes: [
        {
          id: 1,
          callFrame: frame('sendCommand', 'file:///x/node_modules/ioredis/built/Redis.js'),
          children: [2],
        },
        { id: 2, callFrame: frame('write', 'node:net'), children: [3] },
        { id: 3, callFrame: frame('writeUtf8String', '') },
        { id: 4, callFrame: frame('respond', 'node:internal/http2/core'), children: [5] },
        { id: 5, callFrame: frame('writev', '') },
      ],
      samples: [3, 3, 3, 5],
      timeDeltas: [100, 100, 100, 100],
    });
    expect(summary.owners).toEqual([
      { owner: 'socket writes (the system calls), for ioredis', percent: 75 },
      { owner: "socket writes (the system calls), for Node's http2", percent: 25 },
    ]);
  });

  it('reads resident memory from /proc, as the kernel reports it for this process', () => {
    const status = readFileSync('/proc/self/status', 'utf8');
    const kernelKb = Number(/^VmRSS:\s+(\d+) kB/m.exec(status)?.[1]);
    const rss = treeRssBytes(process.pid);
    // The two reads are a moment apart, and the process may allocate in between.
    expect(Math.abs(rss / 1024 - kernelKb)).toBeLessThan(kernelKb * 0.1);
  });

  it('draws one line per service, a point per tier and the target', () => {
    const tiers = [1_000, 2_000, 5_000].map((offeredRps, i) => ({
      ...run({ offeredRps, latencyMs: { p50: 1, p95: 2, p99: 1 + i, max: 9, mean: 1 } }),
      verdict: i < 1 ? ('ok' as const) : i < 2 ? ('break' as const) : ('past-break' as const),
      reasons: [],
    }));
    const svg = latencyChart(
      [{ service: 'redis', tiers, breakRps: 2_000, breakReasons: [] }],
      't',
      2,
    );
    expect(svg.match(/<polyline /g)).toHaveLength(1);
    expect(svg.match(/<circle /g)).toHaveLength(3);
    expect(svg).toContain('target 2 ms');
  });
});
