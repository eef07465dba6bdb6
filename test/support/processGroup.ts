import type { ChildProcess } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Redis } from 'ioredis';

/**
 * The redis-server processes of one test topology (a cluster, a sentinel set): a scratch
 * directory, the children to kill, and one assertion client per port, all gone with `stop()`.
 */
export interface ProcessGroup {
  dir: string;
  children: ChildProcess[];
  /** A plain client for assertions on that port, made once. */
  client(port: number): Redis;
  stop(): Promise<void>;
}

export function createProcessGroup(prefix: string): ProcessGroup {
  const dir = mkdtempSync(join(tmpdir(), prefix));
  const children: ChildProcess[] = [];
  const clients = new Map<number, Redis>();
  return {
    dir,
    children,
    client(port) {
      let existing = clients.get(port);
      if (!existing) {
        existing = new Redis({ port, host: '127.0.0.1', maxRetriesPerRequest: 1 });
        existing.on('error', () => {});
        clients.set(port, existing);
      }
      return existing;
    },
    async stop() {
      for (const redis of clients.values()) redis.disconnect();
      await Promise.all(
        children.map(
          (child) =>
            new Promise<void>((resolve) => {
              if (child.exitCode !== null || child.signalCode !== null) return resolve();
              child.once('exit', () => resolve());
              child.kill('SIGKILL');
            }),
        ),
      );
      rmSync(dir, { recursive: true, force: true });
    },
  };
}
