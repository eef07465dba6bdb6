import { spawn } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { track } from './children.js';
import { parseStat } from './procstat.js';

/** One ghz run and what it reports, with latencies in milliseconds. */
export interface GhzLoad {
  address: string;
  request: object;
  seconds: number;
  concurrency: number;
  connections: number;
  /** Constant arrival rate, sent asynchronously (open loop); absent means closed loop. */
  rps?: number;
  timeoutMs: number;
}

export interface GhzResult {
  count: number;
  wallSeconds: number;
  totalSeconds: number;
  statusCodes: Record<string, number>;
  errors: Record<string, number>;
  /** Over successful calls only, as ghz computes them; null when none succeeded. */
  latencyMs: { p50: number; p95: number; p99: number; max: number; mean: number } | null;
  /** ghz's own CPU time, user + system, in seconds. */
  cpuSeconds: number;
  /** Calls answered OK within GOODPUT_MS, from ghz's per-call details (see answeredInTime). */
  answeredInTime: number;
  /**
   * Calls answered OK after LATE_MS, end to end, counted the same way: at most these would have
   * failed in a service bounding its Redis calls by tollgate's default REDIS_TIMEOUT.
   */
  answeredLate: number;
}

/** Envoy's default timeout for a rate-limit call: a later answer is as good as none. */
export const GOODPUT_MS = 20;

/** tollgate's default REDIS_TIMEOUT: calls answered later than this (answeredLate). */
export const LATE_MS = 15;

/** One call as ghz's JSON report details it; latency in nanoseconds. */
export interface GhzCall {
  latency: number;
  status: string;
  error?: string;
}

interface GhzReport {
  count: number;
  total: number;
  average: number;
  slowest: number;
  statusCodeDistribution?: Record<string, number>;
  errorDistribution?: Record<string, number>;
  latencyDistribution?: { percentage: number; latency: number }[] | null;
  details?: GhzCall[] | null;
}

export const CALL = 'envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit';

// ghz runs under sh, which waits for it and then reads its own /proc stat: the cutime and cstime
// there are ghz's CPU, exact, which no reading from outside can get once ghz has been reaped.
const WRAPPER =
  '"$@"; status=$?; read -r line < /proc/$$/stat; echo "$line" > "$BENCH_STAT"; exit $status';

export function createGhz(binary: string, repoRoot: string) {
  const protoDir = join(repoRoot, 'proto');
  return {
    async run(load: GhzLoad): Promise<GhzResult> {
      const dir = mkdtempSync(join(tmpdir(), 'tollgate-bench-'));
      const output = join(dir, 'report.json');
      // --proto for tollgate and the bare server alike: the bare server has no reflection.
      const args = [
        '--insecure',
        `--proto=${join(protoDir, 'envoy/service/ratelimit/v3/rls.proto')}`,
        `--import-paths=${protoDir}`,
        `--call=${CALL}`,
        `--data=${JSON.stringify(load.request)}`,
        `--concurrency=${load.concurrency}`,
        `--connections=${load.connections}`,
        `--duration=${Math.round(load.seconds * 1000)}ms`,
        `--timeout=${load.timeoutMs}ms`,
        // Calls in flight when the duration ends complete and count. ghz's default closes the
        // connections under them, and reports each as an Unavailable error that no server made.
        '--duration-stop=wait',
        ...(load.rps === undefined ? [] : [`--rps=${load.rps}`, '--async']),
        '--format=json',
        `--output=${output}`,
        load.address,
      ];
      let stderr = '';
      const started = performance.now();
      try {
        const child = spawn('sh', ['-c', WRAPPER, 'ghz', binary, ...args], {
          env: { ...process.env, BENCH_STAT: join(dir, 'stat') },
          stdio: ['ignore', 'ignore', 'pipe'],
          detached: true,
        });
        track(child, { group: true });
        child.stderr?.on('data', (chunk: Buffer) => (stderr = (stderr + chunk).slice(-4_000)));
        // 'close', not 'exit': by then all of stderr has been read, for the error below.
        const code = await new Promise<number | null>((resolve, reject) => {
          child.once('error', reject);
          child.once('close', (status) => resolve(status));
        });
        const wallSeconds = (performance.now() - started) / 1000;
        if (code !== 0) throw new Error(`ghz exited with ${code}: ${stderr.trim()}`);
        const report = JSON.parse(readFileSync(output, 'utf8')) as GhzReport;
        const cpuSeconds = parseStat(readFileSync(join(dir, 'stat'), 'utf8')).childrenCpuSeconds;
        return summarize(report, wallSeconds, cpuSeconds);
      } finally {
        rmSync(dir, { recursive: true, force: true });
      }
    },
  };
}

export type Ghz = ReturnType<typeof createGhz>;

const ms = (nanoseconds: number) => nanoseconds / 1e6;

/** ghz keys errors by message, which names each connection's port: merge those. */
function byMessage(errors: Record<string, number>): Record<string, number> {
  const merged: Record<string, number> = {};
  for (const [message, count] of Object.entries(errors)) {
    const general = message.replace(/\d+\.\d+\.\d+\.\d+:\d+/g, 'ADDRESS');
    merged[general] = (merged[general] ?? 0) + count;
  }
  return merged;
}

/**
 * How many calls were answered OK within `withinMs`, counted call by call. ghz details at most
 * its first million calls of a run; the calls past those are counted as not answered in time, so
 * the count is exact or, on a longer run, low.
 */
export function answeredInTime(calls: readonly GhzCall[], withinMs: number): number {
  const limit = withinMs * 1e6;
  let count = 0;
  for (const call of calls) {
    if (call.status === 'OK' && !call.error && call.latency <= limit) count += 1;
  }
  return count;
}

/** How many calls were answered OK after `afterMs`, counted as answeredInTime counts. */
export function answeredLate(calls: readonly GhzCall[], afterMs: number): number {
  const limit = afterMs * 1e6;
  let count = 0;
  for (const call of calls) {
    if (call.status === 'OK' && !call.error && call.latency > limit) count += 1;
  }
  return count;
}

function summarize(report: GhzReport, wallSeconds: number, cpuSeconds: number): GhzResult {
  const percentile = (p: number) =>
    report.latencyDistribution?.find((entry) => entry.percentage === p)?.latency;
  const [p50, p95, p99] = [percentile(50), percentile(95), percentile(99)];
  const latencyMs =
    p50 !== undefined && p95 !== undefined && p99 !== undefined
      ? {
          p50: ms(p50),
          p95: ms(p95),
          p99: ms(p99),
          max: ms(report.slowest),
          mean: ms(report.average),
        }
      : null;
  return {
    count: report.count,
    wallSeconds,
    totalSeconds: report.total / 1e9,
    statusCodes: report.statusCodeDistribution ?? {},
    errors: byMessage(report.errorDistribution ?? {}),
    latencyMs,
    cpuSeconds,
    answeredInTime: answeredInTime(report.details ?? [], GOODPUT_MS),
    answeredLate: answeredLate(report.details ?? [], LATE_MS),
  };
}
