import type { ChildProcess } from 'node:child_process';
import { join } from 'node:path';
import { pathToFileURL } from 'node:url';
import { median } from './stats.js';

/**
 * `--tail-diagnostics`: what tollgate's own process did to the tail at each constant rate, its
 * event loop's delay at 1 ms resolution and its GC pauses. It reuses scripts/loop-delay.mjs,
 * loaded into the process with `--import`: on SIGUSR2 that prints one `loop-delay {...}` line on
 * stderr about the time since the last one, and starts counting again. A run is framed by two
 * signals, the first only to start the count.
 */

export interface GcPauses {
  count: number;
  totalMs: number;
  maxMs: number;
}

/** One window of loop-delay.mjs's report, between two signals. */
export interface LoopWindow {
  loopDelay: { p50Ms: number; p99Ms: number; maxMs: number };
  gc: GcPauses & { byKind: Record<string, GcPauses> };
}

/** A tier's diagnostics over its rounds: the medians of their p50 and p99, and the worst max. */
export interface TierTail {
  rounds: number;
  loopDelayMs: { p50: number; p99: number; max: number };
  /** Over all the rounds: pauses, their total and the longest, and so by kind. */
  gc: GcPauses & { byKind: Record<string, GcPauses> };
}

export interface LoopProbe {
  /** Ends the current window and starts the next: what the loop and GC did since the last call. */
  window(): Promise<LoopWindow>;
}

/** The node flags that load the watcher into a tollgate of this checkout. */
export function loopDelayArgs(repoRoot: string): string[] {
  return ['--import', pathToFileURL(join(repoRoot, 'scripts', 'loop-delay.mjs')).href];
}

const LINE = /^loop-delay (\{.*\})$/;

/** Reads the watcher's lines from the process's stderr, one per `window()`. */
export function createLoopProbe(child: ChildProcess, timeoutMs = 5_000): LoopProbe {
  const waiting: ((json: string) => void)[] = [];
  let pending = '';
  child.stderr?.on('data', (chunk: Buffer) => {
    // Bounded: a line longer than this is no report of the watcher's.
    pending = (pending + chunk.toString()).slice(-65_536);
    for (let at = pending.indexOf('\n'); at >= 0; at = pending.indexOf('\n')) {
      const match = LINE.exec(pending.slice(0, at));
      pending = pending.slice(at + 1);
      if (match) waiting.shift()?.(match[1]!);
    }
  });
  return {
    async window() {
      const json = new Promise<string>((resolve, reject) => {
        const take = (text: string) => {
          clearTimeout(timer);
          resolve(text);
        };
        const timer = setTimeout(() => {
          waiting.splice(waiting.indexOf(take), 1);
          reject(new Error(`no loop-delay report within ${timeoutMs} ms of SIGUSR2`));
        }, timeoutMs);
        waiting.push(take);
      });
      child.kill('SIGUSR2');
      return parseLoopWindow(await json);
    },
  };
}

export function parseLoopWindow(json: string): LoopWindow {
  const line = JSON.parse(json) as Partial<LoopWindow>;
  if (!line.loopDelay || !line.gc) throw new Error(`not a loop-delay report: ${json}`);
  return {
    loopDelay: line.loopDelay,
    gc: { ...line.gc, maxMs: line.gc.maxMs ?? NaN, byKind: line.gc.byKind ?? {} },
  };
}

function addPauses(sum: GcPauses, more: GcPauses): GcPauses {
  return {
    count: sum.count + more.count,
    totalMs: sum.totalMs + more.totalMs,
    maxMs: Math.max(sum.maxMs, more.maxMs),
  };
}

export function summarizeTail(windows: readonly LoopWindow[]): TierTail | null {
  if (windows.length === 0) return null;
  const byKind: Record<string, GcPauses> = {};
  let gc: GcPauses = { count: 0, totalMs: 0, maxMs: 0 };
  for (const window of windows) {
    gc = addPauses(gc, window.gc);
    for (const [kind, pauses] of Object.entries(window.gc.byKind)) {
      byKind[kind] = addPauses(byKind[kind] ?? { count: 0, totalMs: 0, maxMs: 0 }, pauses);
    }
  }
  return {
    rounds: windows.length,
    loopDelayMs: {
      p50: median(windows.map((w) => w.loopDelay.p50Ms)),
      p99: median(windows.map((w) => w.loopDelay.p99Ms)),
      max: Math.max(...windows.map((w) => w.loopDelay.maxMs)),
    },
    gc: { ...gc, byKind },
  };
}
