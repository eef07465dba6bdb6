import type { ChildProcess } from 'node:child_process';

/**
 * Every process the bench started, so that the end of a run, an error or Ctrl-C stops them all,
 * and nothing else: processes are stopped by their own id (or their own group), never by name.
 */
interface Tracked {
  child: ChildProcess;
  /** Spawned detached: its id is also its process group, which holds the ghz under a shell. */
  group: boolean;
}

const live = new Set<Tracked>();

export function track(child: ChildProcess, options: { group?: boolean } = {}): ChildProcess {
  const entry = { child, group: options.group ?? false };
  live.add(entry);
  child.once('exit', () => live.delete(entry));
  return child;
}

function exited(child: ChildProcess): boolean {
  return child.exitCode !== null || child.signalCode !== null;
}

function signal(entry: Tracked, name: NodeJS.Signals): void {
  const pid = entry.child.pid;
  if (pid === undefined || exited(entry.child)) return;
  try {
    if (entry.group) process.kill(-pid, name);
    else entry.child.kill(name);
  } catch {
    // It exited between the check and the signal.
  }
}

/** SIGTERM, then SIGKILL after `graceMs`; resolves once the process has exited. */
export function stopChild(child: ChildProcess, graceMs = 3_000): Promise<void> {
  const entry = [...live].find((candidate) => candidate.child === child) ?? { child, group: false };
  if (exited(child)) return Promise.resolve();
  return new Promise((resolve) => {
    const timer = setTimeout(() => signal(entry, 'SIGKILL'), graceMs);
    child.once('exit', () => {
      clearTimeout(timer);
      resolve();
    });
    signal(entry, 'SIGTERM');
  });
}

export async function stopAll(graceMs = 3_000): Promise<void> {
  await Promise.all([...live].map((entry) => stopChild(entry.child, graceMs)));
}

/** The last resort when the harness itself exits: synchronous, so only SIGKILL. */
export function killAllNow(): void {
  for (const entry of live) signal(entry, 'SIGKILL');
}
