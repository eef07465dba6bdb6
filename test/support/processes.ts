import { spawn, type ChildProcess } from 'node:child_process';
import { existsSync, readdirSync, readFileSync, readlinkSync } from 'node:fs';
import { createRateLimitClient, type RateLimitClient } from '@tollgate/client';
import { freePort } from './ports.js';
import { eventually, healthStatus, writeRules } from './tollgate.js';

/** tollgate as its own process, started from the built entry point like `npm start` does. */
export interface TollgateProcess {
  address: string;
  /** The HTTP endpoints, e.g. `${httpUrl}/metrics`. */
  httpUrl: string;
  client: RateLimitClient;
  child: ChildProcess;
  /** Everything it wrote to stderr, for failure messages. */
  stderr(): string;
  /** Everything it wrote to stdout (its logs), when spawned with `captureStdout`; else ''. */
  stdout(): string;
  stop(): Promise<number | null>;
}

export interface SpawnOptions {
  /** Keep its standard output (the logs) for `stdout()`; by default it is discarded. */
  captureStdout?: boolean;
  /**
   * Resolve once its gRPC health answers at all, SERVING or not; by default, once it is
   * SERVING. For a service that is expected to start unhealthy.
   */
  anyHealth?: boolean;
  /** Run it under this limit of open files (RLIMIT_NOFILE, soft and hard), with prlimit. */
  fileLimit?: number;
  /** The script and its arguments; by default `dist/main.js`, as `npm start` runs it. */
  entry?: string[];
}

/**
 * Another suite running beside this one draws its ports from the same blocks, and may take ours
 * between the check that found it free and the service's bind, which comes seconds later on a
 * busy machine. Then the service says its port is in use, or another suite's service answers on
 * it first; either way it is started again on other ports.
 */
export async function spawnTollgate(
  rules: string,
  env: Record<string, string>,
  options: SpawnOptions = {},
): Promise<TollgateProcess> {
  for (let attempt = 1; ; attempt++) {
    try {
      return await spawnOnFreePorts(rules, env, options);
    } catch (error) {
      const clash =
        error instanceof PortTaken || /is already in use by another process/.test(String(error));
      if (attempt >= 5 || !clash) throw error;
    }
  }
}

async function spawnOnFreePorts(
  rules: string,
  env: Record<string, string>,
  options: SpawnOptions,
): Promise<TollgateProcess> {
  const port = await freePort();
  const httpPort = await freePort();
  const node = [process.execPath, ...(options.entry ?? ['dist/main.js'])];
  const command =
    options.fileLimit === undefined ? node : ['prlimit', `--nofile=${options.fileLimit}`, ...node];
  const child = spawn(command[0] as string, command.slice(1), {
    env: {
      ...process.env,
      CONFIG_PATH: writeRules(rules),
      GRPC_HOST: '127.0.0.1',
      GRPC_PORT: String(port),
      HOST: '127.0.0.1',
      PORT: String(httpPort),
      LOG_LEVEL: 'warn',
      ...env,
    },
    stdio: ['ignore', options.captureStdout ? 'pipe' : 'ignore', 'pipe'],
  });
  let stderr = '';
  child.stderr?.on('data', (chunk: Buffer) => (stderr += chunk.toString()));
  let stdout = '';
  child.stdout?.on('data', (chunk: Buffer) => (stdout += chunk.toString()));
  const address = `127.0.0.1:${port}`;
  // A process that exited will never become healthy: say so at once, with its stderr.
  const exited = () => child.exitCode !== null || child.signalCode !== null;
  const healthy = await eventually(async () => {
    if (exited()) return true;
    const status = await healthStatus(address);
    return options.anyHealth === true || status === 'SERVING';
  }, 15_000).then(
    () => !exited(),
    () => false,
  );
  if (!healthy) {
    // One still starting would outlive the test.
    await kill(child);
    throw new Error(`tollgate on ${address} did not become healthy: ${stderr}`);
  }
  // Health answered, but perhaps from another suite's service that bound the port before this
  // one: this one would then exit, and calls meant for it would go to the other until that
  // stopped, and then be refused.
  if (!listensOn(child, port)) {
    await kill(child);
    throw new PortTaken(`port ${port} is held by another process, not this tollgate: ${stderr}`);
  }
  const client = createRateLimitClient(address);
  return {
    address,
    httpUrl: `http://127.0.0.1:${httpPort}`,
    client,
    child,
    stderr: () => stderr,
    stdout: () => stdout,
    stop: () =>
      new Promise((resolve) => {
        client.close();
        if (child.exitCode !== null || child.signalCode !== null) return resolve(child.exitCode);
        child.once('exit', (code) => resolve(code));
        child.kill('SIGTERM');
      }),
  };
}

/** The port answered, but from another process than the one started for it. */
class PortTaken extends Error {}

function kill(child: ChildProcess): Promise<void> {
  return new Promise((resolve) => {
    if (child.exitCode !== null || child.signalCode !== null) return resolve();
    child.once('exit', () => resolve());
    child.kill('SIGKILL');
  });
}

/**
 * Whether the child, or a process under it (a cluster's workers), holds the socket listening on
 * TCP `port`: an inode of /proc/net/tcp{,6} in LISTEN state, among its open files. Where there is
 * no /proc to read (not Linux), it cannot be told, and the answer is yes.
 */
function listensOn(child: ChildProcess, port: number): boolean {
  if (!existsSync('/proc/net/tcp')) return true;
  const inodes = new Set<string>();
  for (const table of ['/proc/net/tcp', '/proc/net/tcp6']) {
    const rows = existsSync(table) ? readFileSync(table, 'utf8').split('\n').slice(1) : [];
    for (const row of rows) {
      // sl, local address:port (hex), remote address:port, state (0A is LISTEN), ..., inode.
      const fields = row.trim().split(/\s+/);
      const localPort = Number.parseInt(fields[1]?.split(':')[1] ?? '', 16);
      if (fields[3] === '0A' && localPort === port && fields[9]) inodes.add(fields[9]);
    }
  }
  if (child.pid === undefined || inodes.size === 0) return false;
  for (const pid of processTree(child.pid)) {
    let fds: string[];
    try {
      fds = readdirSync(`/proc/${pid}/fd`);
    } catch {
      continue; // gone meanwhile
    }
    for (const fd of fds) {
      try {
        const socket = /^socket:\[(\d+)\]$/.exec(readlinkSync(`/proc/${pid}/fd/${fd}`));
        if (socket && inodes.has(socket[1]!)) return true;
      } catch {
        // closed meanwhile
      }
    }
  }
  return false;
}

/**
 * Runs tollgate (`node dist/main.js`) on these rules to its exit, on free ports of 127.0.0.1,
 * without waiting for it to serve: for start-ups that must fail. Killed past 30 s.
 */
/**
 * What a refused start-up said: the message of the one fatal JSON line on stderr, or the whole
 * of stderr when it is anything else, so that a failed assertion shows what was printed.
 */
export function refusal(stderr: string): string {
  const lines = stderr.split('\n').filter(Boolean);
  if (lines.length !== 1) return stderr;
  try {
    const line = JSON.parse(lines[0] as string) as { level?: unknown; msg?: unknown };
    return line.level === 60 && typeof line.msg === 'string' ? line.msg : stderr;
  } catch {
    return stderr;
  }
}

export async function runToExit(
  rules: string,
  env: Record<string, string>,
): Promise<{ code: number | null; stdout: string; stderr: string }> {
  const child = spawn(process.execPath, ['dist/main.js'], {
    env: {
      ...process.env,
      CONFIG_PATH: writeRules(rules),
      GRPC_HOST: '127.0.0.1',
      GRPC_PORT: String(await freePort()),
      HOST: '127.0.0.1',
      PORT: String(await freePort()),
      ...env,
    },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let stdout = '';
  let stderr = '';
  child.stdout.on('data', (chunk: Buffer) => (stdout += chunk.toString()));
  child.stderr.on('data', (chunk: Buffer) => (stderr += chunk.toString()));
  const hung = setTimeout(() => child.kill('SIGKILL'), 30_000);
  const code = await new Promise<number | null>((resolve) => child.once('close', resolve));
  clearTimeout(hung);
  return { code, stdout, stderr };
}

/** A process's resident memory now, in MB, from /proc. */
export function rssMb(pid: number): number {
  const status = readFileSync(`/proc/${pid}/status`, 'utf8');
  return Number(/^VmRSS:\s+(\d+) kB/m.exec(status)?.[1]) / 1024;
}

/**
 * The resident memory of a process and all its descendants (the workers of WORKERS > 1), in MB,
 * from /proc. A process that exits while it is read counts as nothing.
 */
export function treeRssMb(pid: number): number {
  let total = 0;
  for (const member of processTree(pid)) {
    try {
      total += rssMb(member);
    } catch {
      // gone meanwhile
    }
  }
  return total;
}

/** A process and all its descendants, by the parents in /proc. */
function processTree(pid: number): number[] {
  const children = new Map<number, number[]>();
  for (const entry of readdirSync('/proc')) {
    if (!/^\d+$/.test(entry)) continue;
    try {
      // The parent is the second field after the command, which is in parentheses.
      const stat = readFileSync(`/proc/${entry}/stat`, 'utf8');
      const parent = Number(stat.slice(stat.lastIndexOf(')') + 2).split(' ')[1]);
      children.set(parent, [...(children.get(parent) ?? []), Number(entry)]);
    } catch {
      // gone meanwhile
    }
  }
  const tree: number[] = [];
  for (const queue = [pid]; queue.length > 0;) {
    const next = queue.pop() as number;
    tree.push(next);
    queue.push(...(children.get(next) ?? []));
  }
  return tree;
}
