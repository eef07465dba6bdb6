import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { ChainableCommander, Redis } from 'ioredis';
import { stopAll } from './children.js';
import { startRedis, type RedisServer } from './services.js';
import {
  instructionVariants,
  TENANTS,
  type CountedVariant,
  type Via,
} from './instructionVariants.js';

/**
 * What one script call costs Redis, counted in instructions rather than timed: timings of a few
 * microseconds on a shared machine vary by 2× from round to round, and cannot split a script's
 * cost into parts; the instructions Redis executes per call do not depend on what else runs.
 *
 * How: one fresh redis-server runs under valgrind's callgrind, which counts only inside
 * processInputBuffer (`--collect-atstart=no --toggle-collect=processInputBuffer`): everything
 * Redis does with a call between reading its bytes and writing its reply, that is, parsing it,
 * looking the command up, running it (the script or function, its commands, Lua's garbage
 * collection, converting its reply) and its stats, but not the system calls, the event loop or
 * Redis's timers, which depend on time rather than on the call. Every ECHO makes callgrind write
 * what it counted since the last one and start again from zero (`--dump-before=echoCommand`),
 * and the ECHO's reply comes after that file is written, so each interval is exact, with no
 * polling of callgrind_control. For each variant: FLUSHALL (every variant starts from an empty
 * keyspace of its own keys), `warmUp` calls (the keys' first writes; Lua's allocator and garbage
 * collector reach their steady state), ECHO, half the `measured` calls, ECHO, the other half,
 * ECHO: the last two intervals over `measured` are the variant's count per call, and the two
 * halves' own counts say how repeatable it is. Calls go in pipelines of 100 over 50 tenants,
 * as the timings do. A fixed window's first write in a window costs more than the others: a
 * variant whose calls crossed a window boundary (each minute) is counted again.
 */
export interface InstructionPlan {
  warmUp: number;
  measured: number;
}

export interface InstructionRow {
  id: string;
  variant: string;
  via: Via;
  counters: number;
  /** Thousands of instructions per call. */
  kilo: number;
  /** The same per call in each half of the measured calls: how repeatable the count is. */
  halves: number[];
  /** Counted again after crossing a window boundary. */
  tries: number;
}

const PIPELINE = 100;
const WINDOW_MS = 60_000;

export const CALLGRIND_OPTIONS = [
  '--tool=callgrind',
  '--collect-atstart=no',
  '--toggle-collect=processInputBuffer',
  '--dump-before=echoCommand',
];

/** The callgrind dumps of one redis-server: each ECHO ends an interval, read here. */
interface Dumps {
  /** Sends ECHO and returns the instructions counted since the previous one. */
  mark(): Promise<number>;
}

function createDumps(client: Redis, outFile: string): Dumps {
  let part = 0;
  return {
    async mark() {
      await client.echo('mark');
      part += 1;
      const path = `${outFile}.${part}`;
      const text = readFileSync(path, 'utf8');
      rmSync(path);
      if (!text.includes('Trigger: --dump-before=echoCommand')) {
        throw new Error(`${path} is not the dump of an ECHO`);
      }
      return Number(/^totals: (\d+)/m.exec(text)?.[1] ?? 0);
    },
  };
}

function queue(pipeline: ChainableCommander, variant: CountedVariant, handle: string, i: number) {
  const [numkeys, ...rest] = variant.args(i % TENANTS);
  if (variant.via === 'EVALSHA') pipeline.evalsha(handle, numkeys!, ...rest);
  else pipeline.fcall(handle, numkeys!, ...rest);
}

async function send(client: Redis, variant: CountedVariant, handle: string, calls: number) {
  for (let sent = 0; sent < calls; sent += PIPELINE) {
    const pipeline = client.pipeline();
    for (let i = sent; i < Math.min(calls, sent + PIPELINE); i += 1) {
      queue(pipeline, variant, handle, i);
    }
    const replies = (await pipeline.exec()) ?? [];
    const failed = replies.find(([error]) => error);
    if (failed) throw new Error(`${variant.title} (${variant.via}): ${String(failed[0])}`);
  }
}

/** Loads the variant's script or library; returns what EVALSHA or FCALL names. */
async function load(client: Redis, variant: CountedVariant): Promise<string> {
  if (variant.via === 'EVALSHA') return (await client.script('LOAD', variant.code)) as string;
  await client.function('LOAD', 'REPLACE', variant.code);
  return variant.fn!;
}

async function count(
  client: Redis,
  dumps: Dumps,
  variant: CountedVariant,
  plan: InstructionPlan,
): Promise<InstructionRow> {
  const handle = await load(client, variant);
  for (let tries = 1; tries <= 3; tries += 1) {
    await client.flushall('SYNC');
    const started = Date.now();
    await send(client, variant, handle, plan.warmUp);
    await dumps.mark();
    const halves: number[] = [];
    for (const calls of [Math.floor(plan.measured / 2), Math.ceil(plan.measured / 2)]) {
      await send(client, variant, handle, calls);
      halves.push((await dumps.mark()) / calls / 1_000);
    }
    if (halves.includes(0)) {
      throw new Error(
        'callgrind counted nothing in processInputBuffer: redis-server has no symbols?',
      );
    }
    if (Math.floor(started / WINDOW_MS) !== Math.floor(Date.now() / WINDOW_MS)) continue;
    return {
      id: variant.id,
      variant: variant.title,
      via: variant.via,
      counters: variant.counters,
      kilo: (halves[0]! + halves[1]!) / 2,
      halves,
      tries,
    };
  }
  throw new Error(`${variant.title}: every try crossed a window boundary`);
}

/** Counts every variant on one redis-server under callgrind, which it stops at the end. */
export async function runScriptInstructions(
  plan: InstructionPlan,
  log: (line: string) => void,
  only: (variant: CountedVariant) => boolean = () => true,
): Promise<InstructionRow[]> {
  const dir = mkdtempSync(join(tmpdir(), 'tollgate-bench-callgrind-'));
  const outFile = join(dir, 'callgrind.out');
  let redis: RedisServer | undefined;
  try {
    redis = await startRedis({
      launcher: ['valgrind', ...CALLGRIND_OPTIONS, `--callgrind-out-file=${outFile}`],
      startMs: 60_000,
    });
    const dumps = createDumps(redis.client, outFile);
    const rows: InstructionRow[] = [];
    for (const variant of instructionVariants().filter(only)) {
      const row = await count(redis.client, dumps, variant, plan);
      log(
        `${row.variant} (${row.via}, ${row.counters}): ${row.kilo.toFixed(1)}k instructions a call`,
      );
      rows.push(row);
    }
    return rows;
  } finally {
    redis?.client.disconnect();
    // Only this redis-server runs in this mode; it writes its last dump before the files go.
    await stopAll();
    rmSync(dir, { recursive: true, force: true });
  }
}
