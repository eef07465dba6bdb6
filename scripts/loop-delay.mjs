// Measures how long the event loop is held, at 1 ms resolution, in the process that loads it:
//
//   node --import ./scripts/loop-delay.mjs dist/main.js
//
// It prints one JSON line to stderr when the process exits, and on SIGUSR2, which then starts
// counting again (so start-up can be left out): the loop delay's percentiles, the GC pauses (count,
// total and longest, and so by kind: minor, major, incremental, weakcb), the turns held past
// LOOP_DELAY_LONG_MS (5 by default), how much of them garbage collection explains (a GC pause
// overlapping the turn), and how much CPU the process used meanwhile: a long turn with little CPU
// is one the machine did not schedule this process, not one its own work held. With
// LOOP_DELAY_TRACE=1 each long turn is also printed as it ends, to line it up with a CPU profile.
//
// Run as a script, it does a whole measurement on 127.0.0.1 and stops by itself:
//
//   node scripts/loop-delay.mjs --rps 1000 --seconds 20 [--warmup 5] [--node BIN] [--scenario three]
//     [--server FILE] [--redis-url URL] [--stdout FILE] [-- FLAG...]
//
// tollgate (dist/, built) on its in-memory store (or the Redis of --redis-url) with fixed windows, ghz (PATH or .cache/ghz/)
// sending one descriptor (or three) at a constant rate, 50 calls in flight on 4 connections, FLAGs
// given to node. The loop is measured after a warm-up at the same rate. It prints ghz's p50/p99
// beside the loop's numbers and the process's CPU per call. --server runs another entry point with
// the same environment (GRPC_PORT, PORT), such as the bench's bare servers. --stdout keeps the
// service's standard output in FILE, for what a FLAG such as --trace-gc-nvp prints there.
import { spawn } from 'node:child_process';
import { existsSync, mkdtempSync, openSync, readFileSync, writeFileSync } from 'node:fs';
import { connect } from 'node:net';
import { tmpdir } from 'node:os';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import {
  constants,
  monitorEventLoopDelay,
  performance,
  PerformanceObserver,
} from 'node:perf_hooks';
import { setImmediate, setInterval, setTimeout } from 'node:timers';
import { freePort } from './freePort.mjs';

const self = fileURLToPath(import.meta.url);

if (process.argv[1] === self) await measure(process.argv.slice(2));
else watchLoop();

/** V8's kinds of collection, as a 'gc' entry's detail.kind gives them. */
const GC_KINDS = {
  [constants.NODE_PERFORMANCE_GC_MINOR]: 'minor',
  [constants.NODE_PERFORMANCE_GC_MAJOR]: 'major',
  [constants.NODE_PERFORMANCE_GC_INCREMENTAL]: 'incremental',
  [constants.NODE_PERFORMANCE_GC_WEAKCB]: 'weakcb',
};

function watchLoop() {
  const longMs = Number(process.env.LOOP_DELAY_LONG_MS ?? 5);
  const trace = process.env.LOOP_DELAY_TRACE === '1';
  const histogram = monitorEventLoopDelay({ resolution: 1 });
  histogram.enable();
  // GC pauses, kept for a minute: enough to explain any turn that has just ended.
  const pauses = [];
  let gcMs = 0;
  let gcCount = 0;
  let gcMaxMs = 0;
  let gcByKind = {};
  const countPauses = (entries) => {
    for (const entry of entries) {
      pauses.push({ start: entry.startTime, end: entry.startTime + entry.duration });
      gcMs += entry.duration;
      gcCount += 1;
      gcMaxMs = Math.max(gcMaxMs, entry.duration);
      const kind = GC_KINDS[entry.detail?.kind] ?? 'other';
      const byKind = (gcByKind[kind] ??= { count: 0, totalMs: 0, maxMs: 0 });
      byKind.count += 1;
      byKind.totalMs += entry.duration;
      byKind.maxMs = Math.max(byKind.maxMs, entry.duration);
    }
    while (pauses.length > 0 && pauses[0].end < performance.now() - 60_000) pauses.shift();
  };
  const observer = new PerformanceObserver((list) => countPauses(list.getEntries()));
  observer.observe({ entryTypes: ['gc'] });

  // A 1 ms tick: a tick that comes late by more than longMs ended a long turn.
  const fresh = () => ({
    count: 0,
    totalMs: 0,
    maxMs: 0,
    gcMs: 0,
    mostlyGc: 0,
    cpuMs: 0,
    descheduled: 0,
  });
  let long = fresh();
  let since = process.cpuUsage();
  let last = performance.now();
  let lastCpu = process.cpuUsage();
  const tick = setInterval(() => {
    const now = performance.now();
    const cpu = process.cpuUsage();
    const heldMs = now - last - 1;
    const cpuMs = (cpu.user - lastCpu.user + cpu.system - lastCpu.system) / 1000;
    last = now;
    lastCpu = cpu;
    if (heldMs < longMs) return;
    // Deferred by a tick, so that the observer has heard of a GC that ended this turn.
    setImmediate(() => {
      let inGc = 0;
      for (const p of pauses)
        inGc += Math.max(0, Math.min(p.end, now) - Math.max(p.start, now - heldMs - 1));
      long.count += 1;
      long.totalMs += heldMs;
      long.maxMs = Math.max(long.maxMs, heldMs);
      long.gcMs += inGc;
      long.cpuMs += cpuMs;
      if (inGc >= heldMs / 2) long.mostlyGc += 1;
      if (cpuMs < heldMs / 2) long.descheduled += 1;
      if (trace) {
        process.stderr.write(
          `loop-delay: held ${heldMs.toFixed(1)} ms at ${now.toFixed(0)} ms, ` +
            `CPU ${cpuMs.toFixed(1)} ms, GC ${inGc.toFixed(1)} ms\n`,
        );
      }
    });
  }, 1);
  tick.unref();

  const report = () => {
    // The observer hears of a pause a tick late: count those not yet delivered in this report.
    countPauses(observer.takeRecords());
    const used = process.cpuUsage(since);
    const ms = (ns) => Number((ns / 1e6).toFixed(2));
    const line = {
      loopDelay: {
        p50Ms: ms(histogram.percentile(50)),
        p99Ms: ms(histogram.percentile(99)),
        p999Ms: ms(histogram.percentile(99.9)),
        maxMs: ms(histogram.max),
      },
      longTurns: {
        overMs: longMs,
        count: long.count,
        totalMs: Number(long.totalMs.toFixed(1)),
        maxMs: Number(long.maxMs.toFixed(1)),
        gcMsInside: Number(long.gcMs.toFixed(1)),
        mostlyGc: long.mostlyGc,
        cpuMsInside: Number(long.cpuMs.toFixed(1)),
        descheduled: long.descheduled,
      },
      gc: {
        count: gcCount,
        totalMs: Number(gcMs.toFixed(1)),
        maxMs: Number(gcMaxMs.toFixed(2)),
        byKind: Object.fromEntries(
          Object.entries(gcByKind).map(([kind, k]) => [
            kind,
            {
              count: k.count,
              totalMs: Number(k.totalMs.toFixed(1)),
              maxMs: Number(k.maxMs.toFixed(2)),
            },
          ]),
        ),
      },
      cpuMs: Number(((used.user + used.system) / 1000).toFixed(0)),
      node: process.version,
    };
    process.stderr.write(`loop-delay ${JSON.stringify(line)}\n`);
  };
  process.on('exit', report);
  process.on('SIGUSR2', () => {
    report();
    histogram.reset();
    long = fresh();
    gcMs = gcCount = gcMaxMs = 0;
    gcByKind = {};
    since = process.cpuUsage();
  });
}

async function measure(args) {
  const flag = (name, fallback) => {
    const at = args.indexOf(`--${name}`);
    return at >= 0 && at < args.indexOf('--') >>> 0 ? args[at + 1] : fallback;
  };
  const nodeFlags = args.includes('--') ? args.slice(args.indexOf('--') + 1) : [];
  const rps = Number(flag('rps', '1000'));
  const seconds = Number(flag('seconds', '20'));
  const warmup = Number(flag('warmup', '5'));
  const node = flag('node', process.execPath);
  const root = dirname(dirname(self));
  const ghz = [join(root, '.cache/ghz/v0.121.0/ghz'), 'ghz'].find(
    (p) => p === 'ghz' || existsSync(p),
  );
  const work = mkdtempSync(join(tmpdir(), 'loop-delay-'));
  writeFileSync(
    join(work, 'rules.yaml'),
    [
      'domain: bench',
      'descriptors:',
      '  - key: hot',
      '    rate_limit: {unit: hour, requests_per_unit: 4000000000}',
      '  - key: tenant',
      '    rate_limit: {unit: hour, requests_per_unit: 4000000000}',
      '    descriptors:',
      '      - key: route',
      '        rate_limit: {unit: hour, requests_per_unit: 4000000000}',
      '  - key: remote_address',
      '    rate_limit: {unit: hour, requests_per_unit: 4000000000}',
      '',
    ].join('\n'),
  );
  const grpcPort = await freePort();
  const httpPort = await freePort();
  const entry = resolve(flag('server', join(root, 'dist/main.js')));
  const stdoutFile = flag('stdout', '');
  const service = spawn(node, [...nodeFlags, '--import', self, entry], {
    cwd: root,
    stdio: ['ignore', stdoutFile ? openSync(stdoutFile, 'w') : 'ignore', 'pipe'],
    env: {
      ...process.env,
      CONFIG_PATH: join(work, 'rules.yaml'),
      REDIS_URL: flag('redis-url', ''),
      DEFAULT_ALGORITHM: 'fixed_window',
      GRPC_HOST: '127.0.0.1',
      GRPC_PORT: String(grpcPort),
      HOST: '127.0.0.1',
      PORT: String(httpPort),
      LOG_LEVEL: 'error',
    },
  });
  let stderr = '';
  service.stderr.on('data', (chunk) => (stderr += chunk));
  // Up once its gRPC port takes connections: tollgate listens there once its rules are loaded.
  for (let i = 0; i < 100; i++) {
    const up = await new Promise((done) => {
      const socket = connect(grpcPort, '127.0.0.1', () => done(socket.end() && true));
      socket.once('error', () => done(false));
    });
    if (up) break;
    await new Promise((done) => setTimeout(done, 100));
  }
  const three = flag('scenario', 'one') === 'three';
  const descriptors = three
    ? [
        { entries: [{ key: 'tenant', value: 'acme' }] },
        {
          entries: [
            { key: 'tenant', value: 'acme' },
            { key: 'route', value: '/orders' },
          ],
        },
        { entries: [{ key: 'remote_address', value: '10.1.2.3' }] },
      ]
    : [{ entries: [{ key: 'hot', value: 'one' }] }];
  const report = join(work, 'ghz.json');
  const ghzRun = (duration, output) =>
    run(ghz, [
      '--insecure',
      `--proto=${join(root, 'proto/envoy/service/ratelimit/v3/rls.proto')}`,
      `--import-paths=${join(root, 'proto')}`,
      '--call=envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit',
      `--data=${JSON.stringify({ domain: 'bench', descriptors })}`,
      '--concurrency=50',
      '--connections=4',
      `--rps=${rps}`,
      '--async',
      `--duration=${duration}s`,
      '--duration-stop=wait',
      '--timeout=5s',
      '--format=json',
      `--output=${output}`,
      `127.0.0.1:${grpcPort}`,
    ]);
  // A warm-up at the same rate, as the bench's, so that start-up and the JIT are left out.
  if (warmup > 0) await ghzRun(warmup, join(work, 'warmup.json'));
  service.kill('SIGUSR2');
  await ghzRun(seconds, report);
  service.kill('SIGTERM');
  await new Promise((resolve) => service.once('exit', resolve));
  const ghzReport = JSON.parse(readFileSync(report, 'utf8'));
  const at = (p) =>
    (ghzReport.latencyDistribution?.find((x) => x.percentage === p)?.latency ?? NaN) / 1e6;
  const loop = JSON.parse([...stderr.matchAll(/loop-delay (\{.*\})/g)].at(-1)?.[1] ?? '{}');
  console.log(
    JSON.stringify({
      rps,
      calls: ghzReport.count,
      errors: Object.values(ghzReport.errorDistribution ?? {}).reduce((a, b) => a + b, 0),
      p50Ms: Number(at(50).toFixed(2)),
      p99Ms: Number(at(99).toFixed(2)),
      cpuUsPerCall: loop.cpuMs && Number(((loop.cpuMs * 1000) / ghzReport.count).toFixed(1)),
      ...loop,
      flags: nodeFlags.join(' '),
    }),
  );
}

function run(command, args) {
  return new Promise((resolve, reject) => {
    const child = spawn(command, args, { stdio: 'ignore' });
    child.once('error', reject);
    child.once('exit', resolve);
  });
}
