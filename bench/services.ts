import { spawn, type ChildProcess } from 'node:child_process';
import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Redis } from 'ioredis';
import { freePort } from '../test/support/ports.js';
import { stopChild, track } from './children.js';
import type { BareKind } from './bareServer.js';
import { createLoopProbe, loopDelayArgs, type LoopProbe } from './tailDiagnostics.js';
import { waitUntilAnswering } from './rlsClient.js';
import { READY_REQUEST, RULES_YAML } from './scenarios.js';
import { VERSUS_READY, VERSUS_RULES_YAML } from './versusScenarios.js';
import { referenceEnv, referenceLayout } from '../test/reference/reference.js';

/** The processes under test, each started here on a free port of 127.0.0.1. */
/** `redis-NAME`: the Redis store with a setting changed, for the levers (bench/variants.ts). */
export type ServiceName =
  | 'bare'
  | 'bare-http2'
  | 'bare-http2-redis'
  | 'bare-http2-commands'
  | 'redis'
  | 'memory'
  | `redis-${string}`
  | 'reference'
  | 'tollgate-fixed'
  | 'tollgate-sliding'
  | 'tollgate-rlqs'
  | `tollgate@${string}`;

/** The Node that runs a service: the bench's own, or another line's (`--node`, runtime.ts). */
export interface NodeRuntime {
  binary: string;
  /** As `node --version` prints it, e.g. v24.11.1. */
  version: string;
}

export const BENCH_NODE: NodeRuntime = { binary: process.execPath, version: process.version };

export interface Service {
  name: ServiceName;
  title: string;
  address: string;
  pid: number;
  /** tollgate's HTTP port, for /metrics; the bare server has none. */
  httpUrl?: string;
  /** The settings it was started with, for the report. */
  settings: Record<string, string>;
  /** The version of the Node that runs it; absent for the reference, which is Go. */
  node?: string;
  /** Its event loop and GC, window by window (`--tail-diagnostics`, tailDiagnostics.ts). */
  loopProbe?: LoopProbe;
  /** Stops it before the end of the run; every process is stopped at the end anyway. */
  stop?: () => Promise<void>;
}

export interface RedisServer {
  url: string;
  /** The same server's Unix socket, for the lever that uses it. */
  unixSocket: string;
  pid: number;
  /** The harness's own connection, for INFO; never the one under test. */
  client: Redis;
}

/** Spawns and tracks a process, keeping the tail of its stderr for the error that says why. */
function launch(command: string, args: string[], env?: Record<string, string>) {
  const child = spawn(command, args, { env, stdio: ['ignore', 'ignore', 'pipe'] });
  track(child);
  let stderr = '';
  child.stderr?.on('data', (chunk: Buffer) => (stderr = (stderr + chunk).slice(-4_000)));
  return { child, stderr: () => stderr.trim() };
}

function pidOf(child: ChildProcess): number {
  if (child.pid === undefined) throw new Error(`${child.spawnfile} did not start`);
  return child.pid;
}

/**
 * `launcher`: a command that runs redis-server (such as valgrind), which must run it in its own
 * process, and `startMs`, how long it may take to answer.
 */
export async function startRedis(
  options: { launcher?: string[]; startMs?: number } = {},
): Promise<RedisServer> {
  const port = await freePort();
  // No persistence: a snapshot or an fsync in the middle of a run would be measured too.
  const unixSocket = join(mkdtempSync(join(tmpdir(), 'tollgate-bench-redis-')), 'redis.sock');
  const args = ['--port', String(port), '--bind', '127.0.0.1', '--save', '', '--appendonly', 'no'];
  args.push('--unixsocket', unixSocket, '--unixsocketperm', '700');
  const [command, ...before] = [...(options.launcher ?? []), 'redis-server'];
  const { child, stderr } = launch(command!, [...before, ...args]);
  child.once('error', () => {});
  const deadline = Date.now() + (options.startMs ?? 10_000);
  for (;;) {
    const client = new Redis({
      host: '127.0.0.1',
      port,
      lazyConnect: true,
      retryStrategy: () => null,
    });
    client.on('error', () => {});
    try {
      await client.connect();
      // Another run beside this one may hold the port with a redis-server of its own.
      const pid = Number(/^process_id:(\d+)/m.exec(await client.info('server'))?.[1]);
      if (pid !== child.pid) {
        client.disconnect();
        throw new Error(
          `port ${port} is held by another redis-server (pid ${pid}); run the bench again`,
        );
      }
      return { url: `redis://127.0.0.1:${port}`, unixSocket, pid: pidOf(child), client };
    } catch (error) {
      if (error instanceof Error && error.message.includes('is held by another')) throw error;
      client.disconnect();
      if (Date.now() > deadline || child.exitCode !== null) {
        throw new Error(`redis-server did not start on port ${port}: ${String(error)} ${stderr()}`);
      }
      await new Promise((resolve) => setTimeout(resolve, 100));
    }
  }
}

export interface TollgateOptions {
  repoRoot: string;
  name: Exclude<ServiceName, 'bare' | 'reference'>;
  /** A rules file of its own instead of the bench's (with the request that proves it ready). */
  rules?: { yaml: string; ready: typeof READY_REQUEST };
  redisUrl?: string;
  workers: number;
  /** Settings beside the bench's own, e.g. `{ REDIS_BATCH_LIMIT: '1' }`. */
  env?: Record<string, string>;
  /** Node's own flags, e.g. `--cpu-prof`. */
  nodeArgs?: string[];
  /** Loads scripts/loop-delay.mjs into it, read through `loopProbe` (tailDiagnostics.ts). */
  loopDelay?: boolean;
  /** The Node to run it on; the bench's own by default. */
  node?: NodeRuntime;
}

export async function startTollgate(options: TollgateOptions): Promise<Service> {
  const rulesDir = mkdtempSync(join(tmpdir(), 'tollgate-bench-rules-'));
  writeFileSync(join(rulesDir, 'bench.yaml'), options.rules?.yaml ?? RULES_YAML);
  const [grpcPort, httpPort] = [await freePort(), await freePort()];
  const settings: Record<string, string> = {
    CONFIG_PATH: join(rulesDir, 'bench.yaml'),
    LOG_LEVEL: 'warn',
    ...(options.redisUrl
      ? // Generous: on two shared cores a scheduling hiccup must not read as a store failure.
        { REDIS_URL: options.redisUrl, REDIS_TIMEOUT: '100ms', WORKERS: String(options.workers) }
      : {}),
    ...options.env,
  };
  // Only these variables: a stray SHADOW_MODE or OTEL_* in the caller's shell would change what
  // is measured.
  const env = {
    PATH: process.env.PATH ?? '',
    HOME: process.env.HOME ?? '',
    GRPC_HOST: '127.0.0.1',
    GRPC_PORT: String(grpcPort),
    HOST: '127.0.0.1',
    PORT: String(httpPort),
    ...settings,
  };
  const main = join(options.repoRoot, 'dist', 'main.js');
  const node = options.node ?? BENCH_NODE;
  const watcher = options.loopDelay ? loopDelayArgs(options.repoRoot) : [];
  const { child, stderr } = launch(
    node.binary,
    [...watcher, ...(options.nodeArgs ?? []), main],
    env,
  );
  const address = `127.0.0.1:${grpcPort}`;
  await waitUntilAnswering(address, options.rules?.ready ?? READY_REQUEST, child, stderr);
  const title = options.redisUrl
    ? `tollgate, Redis store${options.name === 'redis' ? '' : ` (${options.name})`}`
    : 'tollgate, in-memory store';
  return {
    name: options.name,
    title,
    stop: () => stopChild(child),
    address,
    pid: pidOf(child),
    httpUrl: `http://127.0.0.1:${httpPort}`,
    settings,
    node: node.version,
    ...(options.loopDelay ? { loopProbe: createLoopProbe(child) } : {}),
  };
}

const BARE: Record<BareKind, { name: ServiceName; title: string }> = {
  'grpc-js': { name: 'bare', title: 'bare grpc-js, constant OK (no Redis)' },
  http2: {
    name: 'bare-http2',
    title: 'bare node:http2 with hand-written gRPC framing, constant OK (no Redis)',
  },
  'http2-redis': {
    name: 'bare-http2-redis',
    title: 'node:http2 + one Redis round trip (EVALSHA of return 1), constant OK, decides nothing',
  },
  'http2-commands': {
    name: 'bare-http2-commands',
    title:
      "node:http2 + one FCALL running an exact decision's commands (TIME, HMGET and HSET a counter), constant OK, decides nothing",
  },
};

/** A floor (bareServer.ts) as its own process; `redisUrl` only for the ones that call Redis. */
export async function startBare(
  benchDir: string,
  kind: BareKind = 'grpc-js',
  node: NodeRuntime = BENCH_NODE,
  redisUrl?: string,
): Promise<Service> {
  const port = await freePort();
  const env = {
    PATH: process.env.PATH ?? '',
    GRPC_PORT: String(port),
    BARE_KIND: kind,
    ...(redisUrl ? { REDIS_URL: redisUrl } : {}),
  };
  const { child, stderr } = launch(node.binary, [join(benchDir, 'bareMain.js')], env);
  const address = `127.0.0.1:${port}`;
  await waitUntilAnswering(address, READY_REQUEST, child, stderr);
  return {
    ...BARE[kind],
    stop: () => stopChild(child),
    address,
    pid: pidOf(child),
    settings: {},
    node: node.version,
  };
}

/**
 * envoyproxy/ratelimit's server, built by scripts/reference.sh into .cache/reference/, on the
 * bench's Redis with the rules it accepts: its RUNTIME_ROOT layout, Redis over TCP, statsd off
 * and Prometheus on (with statsd off alone, its stdout sink logs every stat at every flush), and
 * free ports for everything it listens on. Its own defaults otherwise, REDIS_TIMEOUT included.
 */
export async function startReference(repoRoot: string, redis: RedisServer): Promise<Service> {
  const binary = join(repoRoot, '.cache', 'reference', 'service_cmd');
  const { root } = referenceLayout({ 'versus.yaml': VERSUS_RULES_YAML });
  const reference = await referenceEnv(root, redis.url.replace(/^redis:\/\//, ''));
  const { grpcPort } = reference;
  const env = { PATH: process.env.PATH ?? '', HOME: process.env.HOME ?? '', ...reference.env };
  const settings = reference.env;
  const { child, stderr } = launch(binary, [], env);
  child.once('error', () => {});
  const address = `127.0.0.1:${grpcPort}`;
  await waitUntilAnswering(address, VERSUS_READY, child, stderr);
  return {
    name: 'reference',
    title: 'envoyproxy/ratelimit (its Go server), Redis',
    stop: () => stopChild(child),
    address,
    pid: pidOf(child),
    settings,
  };
}
