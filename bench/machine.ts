import { spawnSync } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { cpus, loadavg, release, totalmem } from 'node:os';

/** What the numbers were measured on: they mean little without it. */
export interface Machine {
  cpuModel: string;
  cores: number;
  memoryGiB: number;
  kernel: string;
  node: string;
  redis: string;
  ghz: string;
  /** 1-minute load average at the start and the end: other work on the machine shows here. */
  loadAverage: { start: number; end: number | null };
}

function cpuModel(): string {
  try {
    const info = readFileSync('/proc/cpuinfo', 'utf8');
    return /^model name\s*:\s*(.+)$/m.exec(info)?.[1]?.trim() ?? cpus()[0]?.model ?? 'unknown';
  } catch {
    return cpus()[0]?.model ?? 'unknown';
  }
}

function redisVersion(): string {
  const output = spawnSync('redis-server', ['--version'], { encoding: 'utf8' }).stdout ?? '';
  return /v=(\S+)/.exec(output)?.[1] ?? 'unknown';
}

export function describeMachine(ghzVersion: string): Machine {
  return {
    cpuModel: cpuModel(),
    cores: cpus().length,
    memoryGiB: Math.round((totalmem() / 2 ** 30) * 10) / 10,
    kernel: release(),
    node: process.version,
    redis: redisVersion(),
    ghz: ghzVersion,
    loadAverage: { start: loadavg()[0] ?? 0, end: null },
  };
}

export function finishMachine(machine: Machine): Machine {
  return { ...machine, loadAverage: { ...machine.loadAverage, end: loadavg()[0] ?? 0 } };
}
