import { spawn, spawnSync } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { Ghz } from './ghz.js';
import { track } from './children.js';
import { log } from './series.js';
import type { RedisServer, Service } from './services.js';
import type { Scenario } from './scenarios.js';

/**
 * Where the CPU goes in each process, kernel included, with Linux `perf`: while ghz sends a
 * constant rate to one service, `perf stat` counts the service's (then Redis's) CPU time and
 * context switches, and `perf record` samples where that time went. V8's own profile (--profile)
 * sees only the JavaScript thread; this sees every thread of Node, Go and Redis, and the kernel's
 * work for them (system calls, the TCP stack, context switches).
 */
export interface PerfPlan {
  rps: number;
  seconds: number;
}

export interface PerfSide {
  process: 'service' | 'redis';
  requests: number;
  /** CPU time per request, in µs, from perf stat's task-clock. */
  cpuUs: number;
  contextSwitchesPerRequest: number;
  /** Share of the samples per binary or library: the kernel, the program, libc, V8's JIT... */
  objects: { name: string; percent: number }[];
  symbols: { name: string; percent: number }[];
}

export interface PerfEntry {
  service: string;
  sides: PerfSide[];
}

/** Rows of `perf report --stdio` with the sort key given: "  12.34%  name". */
function reportRows(data: string, sort: 'dso' | 'sym', top: number) {
  const result = spawnSync(
    'perf',
    ['report', '-i', data, '--no-children', '-g', 'none', '--sort', sort, '--stdio'],
    { encoding: 'utf8', maxBuffer: 64 * 1024 * 1024 },
  );
  if (result.status !== 0) throw new Error(`perf report failed: ${result.stderr.slice(-500)}`);
  const rows: { name: string; percent: number }[] = [];
  for (const line of result.stdout.split('\n')) {
    const match = /^\s+([\d.]+)%\s+(.+?)\s*$/.exec(line);
    if (match) rows.push({ percent: Number(match[1]), name: plainName(match[2]!) });
    if (rows.length >= top) break;
  }
  return rows;
}

/** perf's names for what readers know otherwise: Debian's redis-server is redis-check-rdb. */
function plainName(name: string): string {
  if (name === 'redis-check-rdb') return 'redis-server';
  if (name === '[kernel.kallsyms]') return 'the kernel';
  if (name.startsWith('[JIT]')) return "V8's compiled JavaScript";
  return name;
}

export function statCounts(text: string): { taskClockMs: number; contextSwitches: number } {
  const number = (label: string) => {
    const match = new RegExp(`^\\s*([\\d,.]+)\\s+(?:msec\\s+)?${label}`, 'm').exec(text);
    if (!match) throw new Error(`perf stat gave no ${label}: ${text.slice(-300)}`);
    return Number(match[1]!.replace(/,/g, ''));
  };
  return { taskClockMs: number('task-clock'), contextSwitches: number('context-switches') };
}

function perfOf(args: string[]) {
  const child = spawn('perf', args, { stdio: ['ignore', 'ignore', 'pipe'] });
  track(child);
  let stderr = '';
  child.stderr?.on('data', (chunk: Buffer) => (stderr = (stderr + chunk).slice(-2_000)));
  const done = new Promise<void>((resolve, reject) => {
    child.once('error', reject);
    child.once('close', (code) =>
      code === 0 ? resolve() : reject(new Error(`perf ${args[0]} exited ${code}: ${stderr}`)),
    );
  });
  return done;
}

export function assertPerf(): void {
  const probe = spawnSync('perf', ['--version'], { encoding: 'utf8' });
  if (probe.status !== 0) {
    throw new Error(
      "--perf needs Linux perf on PATH (Debian: apt-get install linux-perf), and a kernel.perf_event_paranoid that lets it watch the bench's own processes",
    );
  }
}

export async function runPerf(
  ghz: Ghz,
  redis: RedisServer,
  services: Service[],
  scenario: Scenario,
  plan: PerfPlan,
): Promise<PerfEntry[]> {
  const dir = mkdtempSync(join(tmpdir(), 'tollgate-perf-'));
  const load = { concurrency: 50, connections: 4, timeoutMs: 1_000, rps: plan.rps };
  const entries: PerfEntry[] = [];
  try {
    for (const service of services) {
      await ghz.run({ ...load, seconds: 2, address: service.address, request: scenario.request });
      const sides: PerfSide[] = [];
      for (const [side, pid] of [
        ['service', service.pid],
        ['redis', redis.pid],
      ] as const) {
        log(`perf: ${service.name}, its ${side}, at ${plan.rps} req/s`);
        const data = join(dir, `${service.name}-${side}.data`);
        const watch = ['--', 'sleep', String(plan.seconds)];
        const pidArgs = ['-p', String(pid)];
        const recorded = perfOf(['record', '-F', '999', '-g', '-o', data, ...pidArgs, ...watch]);
        const statFile = `${data}.stat`;
        const counted = perfOf([
          'stat',
          '-e',
          'task-clock,context-switches',
          '-o',
          statFile,
          ...pidArgs,
          ...watch,
        ]);
        // ghz runs a second longer than perf watches, so perf sees load only.
        const run = await ghz.run({
          ...load,
          seconds: plan.seconds + 1,
          address: service.address,
          request: scenario.request,
        });
        await Promise.all([recorded, counted]);
        const requests = plan.rps * plan.seconds;
        const { taskClockMs, contextSwitches } = statCounts(readFileSync(statFile, 'utf8'));
        sides.push({
          process: side,
          requests: run.count,
          cpuUs: (taskClockMs * 1_000) / requests,
          contextSwitchesPerRequest: contextSwitches / requests,
          objects: reportRows(data, 'dso', 6),
          symbols: reportRows(data, 'sym', 15),
        });
      }
      entries.push({ service: service.name, sides });
    }
    return entries;
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}
