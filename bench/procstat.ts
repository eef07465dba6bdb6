import { spawnSync } from 'node:child_process';
import { readdirSync, readFileSync } from 'node:fs';

/**
 * CPU time from /proc/<pid>/stat, in seconds. Reading the kernel's counters before and after a
 * run costs nothing during it, unlike sampling with `ps` or `top`.
 */
export interface ProcStat {
  ppid: number;
  /** utime + stime of the process itself. */
  cpuSeconds: number;
  /** cutime + cstime: children it has waited for, which is how the ghz under `sh` is read. */
  childrenCpuSeconds: number;
}

function clockTicks(): number {
  const result = spawnSync('getconf', ['CLK_TCK'], { encoding: 'utf8' });
  const ticks = Number(result.stdout?.trim());
  return Number.isFinite(ticks) && ticks > 0 ? ticks : 100;
}

const TICKS = clockTicks();

/** Fields after the command name, which may itself contain spaces and parentheses. */
export function parseStat(line: string): ProcStat {
  const fields = line.slice(line.lastIndexOf(')') + 2).split(' ');
  // fields[0] is field 3 of proc(5): state; ppid is 4, utime 14, stime 15, cutime 16, cstime 17.
  const field = (n: number) => Number(fields[n - 3]);
  return {
    ppid: field(4),
    cpuSeconds: (field(14) + field(15)) / TICKS,
    childrenCpuSeconds: (field(16) + field(17)) / TICKS,
  };
}

export function readStat(pid: number): ProcStat | undefined {
  try {
    return parseStat(readFileSync(`/proc/${pid}/stat`, 'utf8'));
  } catch {
    return undefined;
  }
}

/** `pid` and its descendants, so that node:cluster workers (WORKERS > 1) count too. */
function tree(pid: number): { pid: number; stat: ProcStat }[] {
  const stats = new Map<number, ProcStat>();
  for (const name of readdirSync('/proc')) {
    if (!/^\d+$/.test(name)) continue;
    const stat = readStat(Number(name));
    if (stat) stats.set(Number(name), stat);
  }
  const found: { pid: number; stat: ProcStat }[] = [];
  const pending = [pid];
  for (let next = pending.pop(); next !== undefined; next = pending.pop()) {
    const current = next;
    const stat = stats.get(current);
    if (stat) found.push({ pid: current, stat });
    for (const [child, childStat] of stats) if (childStat.ppid === current) pending.push(child);
  }
  return found;
}

/** CPU seconds of `pid` and its descendants. */
export function treeCpuSeconds(pid: number): number {
  return tree(pid).reduce((sum, { stat }) => sum + stat.cpuSeconds, 0);
}

const PAGE_BYTES = (() => {
  const result = spawnSync('getconf', ['PAGESIZE'], { encoding: 'utf8' });
  const bytes = Number(result.stdout?.trim());
  return Number.isFinite(bytes) && bytes > 0 ? bytes : 4096;
})();

/** Resident set size of `pid` and its descendants, in bytes, from /proc/<pid>/statm. */
export function treeRssBytes(pid: number): number {
  let total = 0;
  for (const { pid: member } of tree(pid)) {
    try {
      const resident = Number(readFileSync(`/proc/${member}/statm`, 'utf8').split(' ')[1]);
      total += resident * PAGE_BYTES;
    } catch {
      // Gone since the listing.
    }
  }
  return total;
}
