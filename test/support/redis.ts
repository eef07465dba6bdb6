import { spawn, type ChildProcess } from 'node:child_process';
import { mkdtempSync } from 'node:fs';
import { connect } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Redis } from 'ioredis';
import type { RedisSettings } from '../../src/process/settings.js';
import { createRedisStore, type RedisStoreOptions } from '../../src/store/redisStore.js';
import type { Store } from '../../src/store/Store.js';
import { freePort } from './ports.js';
import { hasRedisServer, redisServer } from './redisServer.js';

/**
 * A real Redis for integration tests: a `redis-server` (or TEST_REDIS_SERVER, see redisServer.ts)
 * spawned on a free port when the binary exists, otherwise a testcontainers container when a Docker engine exists. With neither, tests
 * fail and say how to get one; they never skip silently.
 */
/** The commands of README's least-privilege ACL line. */
export const README_ACL_COMMANDS = [
  '+fcall',
  '+function|load',
  '+evalsha',
  '+eval',
  '+hmget',
  '+hset',
  '+hgetall',
  '+hdel',
  '+pexpire',
  '+time',
  '+ping',
  '+del',
  '+exists',
];

/** What README's ACL line grants for refund notices (see src/store/invalidation.ts). */
export const README_ACL_PUBSUB = ['&tollgate:given-back', '+publish', '+subscribe'];

export interface TestRedis {
  host: string;
  port: number;
  url: string;
  /** The Unix socket it also listens on (spawned servers only). */
  unixSocket?: string;
  /** A plain client for assertions (not the one under test). */
  client: Redis;
  /** Kills the server (SIGKILL), as a crash would. */
  kill(): Promise<void>;
  /**
   * Stops the server (SIGSTOP) or lets it go on (SIGCONT): its connections stay open and
   * answer nothing, as a partitioned or hung server's do. Spawned servers only.
   */
  pause(): void;
  resume(): void;
  /** Starts it again on the same port: empty, unless its options keep data (AOF, RDB). */
  restart(): Promise<void>;
  stop(): Promise<void>;
}

/** Settings for a store of tollgate's own on this Redis, as `REDIS_URL` would give them. */
export function storeSettings(
  redis: TestRedis,
  overrides: Partial<RedisSettings> = {},
): RedisSettings {
  return {
    type: 'single',
    host: redis.host,
    port: redis.port,
    username: undefined,
    password: undefined,
    db: 0,
    tls: undefined,
    timeoutMs: 2_000,
    ...overrides,
  };
}

/**
 * The two ways decision calls reach Redis: FCALL of the function library, and EVALSHA of the
 * scripts where functions are refused (see src/store/functions.ts). Suites that decide run on both.
 */
export const CALL_PATHS = ['functions', 'scripts'] as const;
export type CallPath = (typeof CALL_PATHS)[number];

/**
 * A Redis store whose calls go by `path` from the first check on (REDIS_FUNCTIONS=on or off),
 * once its first connection chose it.
 */
export async function openPathStore(
  redis: TestRedis,
  path: CallPath,
  options: RedisStoreOptions = {},
  overrides: Partial<RedisSettings> = {},
): Promise<Store> {
  const store = createRedisStore(storeSettings(redis, overrides), {
    ...options,
    functions: path === 'functions' ? 'on' : 'off',
  });
  await store.firstConnection();
  const chosen = store.codePath().kind;
  if (chosen !== path) throw new Error(`the store's calls go as ${chosen}, not ${path}`);
  return store;
}

/**
 * The decision calls a Redis server has run, by its INFO commandstats: FCALL, or EVALSHA and the
 * EVAL sent after a NOSCRIPT.
 */
export async function decisionCalls(client: Redis): Promise<number> {
  const stats = await client.info('commandstats');
  let calls = 0;
  for (const [, count] of stats.matchAll(/^cmdstat_(?:fcall|evalsha|eval):calls=(\d+)/gm)) {
    calls += Number(count);
  }
  return calls;
}

/** `args`: more redis-server options, after the tests' own (spawned servers only). */
export async function startRedis(options: { args?: string[] } = {}): Promise<TestRedis> {
  if (hasRedisServer()) return spawnRedis(options.args);
  if (process.env.TEST_REDIS_SERVER) {
    throw new Error(`TEST_REDIS_SERVER=${redisServer} does not run (--version failed)`);
  }
  if (options.args?.length) throw new Error('redis-server options need a spawned redis-server');
  return containerRedis();
}

/**
 * Another suite running beside this one may pick the same free port a moment earlier: then a
 * redis-server of its own answers there, and ours exits. The server is taken only once its
 * process id says it is ours, and a clash starts again on another port.
 */
async function spawnRedis(args: string[] = []): Promise<TestRedis> {
  for (let attempt = 1; ; attempt++) {
    try {
      return await spawnRedisOn(await freePort(), args);
    } catch (error) {
      if (!(error instanceof PortTaken) || attempt >= 5) throw error;
    }
  }
}

export class PortTaken extends Error {}

export async function spawnRedisOn(port: number, args: string[] = []): Promise<TestRedis> {
  const dir = mkdtempSync(join(tmpdir(), 'tollgate-redis-'));
  const unixSocket = join(dir, 'redis.sock');
  let child: ChildProcess | undefined;

  const launch = async () => {
    child = spawn(
      redisServer,
      ['--port', String(port), '--bind', '127.0.0.1', '--save', '', '--appendonly', 'no'].concat([
        '--enable-debug-command',
        'yes',
        '--daemonize',
        'no',
        '--logfile',
        '',
        '--unixsocket',
        unixSocket,
        '--unixsocketperm',
        '700',
        // Files it writes (AOF, RDB) go beside its socket, never into the checkout.
        '--dir',
        dir,
        ...args,
      ]),
      { stdio: 'ignore' },
    );
    await waitForPing(port, child);
  };
  const kill = async () => {
    const dying = child;
    if (!dying || dying.exitCode !== null || dying.signalCode !== null) return;
    await new Promise<void>((resolve) => {
      dying.once('exit', () => resolve());
      dying.kill('SIGKILL');
    });
  };

  await launch();
  const client = new Redis({
    port,
    host: '127.0.0.1',
    lazyConnect: false,
    maxRetriesPerRequest: 1,
  });
  client.on('error', () => {});
  return {
    host: '127.0.0.1',
    port,
    url: `redis://127.0.0.1:${port}`,
    unixSocket,
    client,
    kill,
    pause: () => child?.kill('SIGSTOP'),
    resume: () => child?.kill('SIGCONT'),
    restart: async () => {
      await kill();
      await launch();
    },
    stop: async () => {
      client.disconnect();
      await kill();
    },
  };
}

/**
 * Resolves once a redis-server answers on `port` and its process id says it is `child`; rejects
 * with PortTaken when another one answers there, and at once when `child` exits first.
 */
export async function waitForPing(port: number, child: ChildProcess | undefined): Promise<void> {
  const deadline = Date.now() + 10_000;
  for (;;) {
    const probe = new Redis({
      port,
      host: '127.0.0.1',
      lazyConnect: true,
      retryStrategy: () => null,
    });
    probe.on('error', () => {});
    try {
      await probe.connect();
      const pid = Number(/^process_id:(\d+)/m.exec(await probe.info('server'))?.[1]);
      if (pid !== child?.pid) {
        child?.kill('SIGKILL');
        throw new PortTaken(`port ${port} is held by another redis-server (pid ${pid})`);
      }
      return;
    } catch (error) {
      if (error instanceof PortTaken) throw error;
      if (child && (child.exitCode !== null || child.signalCode !== null)) {
        throw new Error(
          `redis-server on port ${port} exited (${child.exitCode ?? child.signalCode}) before it answered`,
        );
      }
      if (Date.now() > deadline)
        throw new Error(`redis-server on port ${port} did not start: ${error}`);
      await new Promise((resolve) => setTimeout(resolve, 50));
    } finally {
      probe.disconnect();
    }
  }
}

async function containerRedis(): Promise<TestRedis> {
  let container;
  try {
    const { RedisContainer } = await import('@testcontainers/redis');
    container = await new RedisContainer('redis:7-alpine').start();
  } catch (error) {
    throw new Error(
      'Integration tests need Redis: install redis-server (Debian: apt-get install -y redis-server) ' +
        `or run a Docker engine for testcontainers. Docker failed with: ${error}`,
    );
  }
  const started = container;
  const client = new Redis({ host: started.getHost(), port: started.getPort() });
  return {
    host: started.getHost(),
    port: started.getPort(),
    url: started.getConnectionUrl(),
    client,
    kill: async () => {
      await started.stop();
    },
    pause: () => {
      throw new Error('pause needs a spawned redis-server');
    },
    resume: () => undefined,
    restart: async () => {
      await started.restart();
    },
    stop: async () => {
      client.disconnect();
      await started.stop();
    },
  };
}

/**
 * Redis's MONITOR on a plain socket: `onCommand` gets each command Redis runs, its arguments as
 * they are quoted in the feed (enough for names and numbers; escapes are left as they are).
 * Not ioredis's monitor(): a feed line that arrives in the same read as MONITOR's +OK, on a busy
 * server, reaches its command queue before it knows it is monitoring ("Command queue state
 * error"), which ends the test process.
 */
export async function monitorRedis(
  redis: Pick<TestRedis, 'host' | 'port'>,
  onCommand: (args: string[]) => void,
): Promise<{ close(): void }> {
  const socket = connect(redis.port, redis.host);
  await new Promise<void>((resolve, reject) => {
    socket.once('connect', resolve);
    socket.once('error', reject);
  });
  socket.on('error', () => undefined);
  let pending = '';
  let started: () => void = () => undefined;
  const ready = new Promise<void>((resolve) => (started = resolve));
  socket.on('data', (chunk: Buffer) => {
    pending += chunk.toString('latin1');
    let end: number;
    while ((end = pending.indexOf('\r\n')) >= 0) {
      const line = pending.slice(0, end);
      pending = pending.slice(end + 2);
      if (line === '+OK') started();
      else if (line.startsWith('+')) {
        const args = [...line.matchAll(/"((?:[^"\\]|\\.)*)"/g)].map((match) => match[1]!);
        onCommand(args);
      }
    }
  });
  socket.write('MONITOR\r\n');
  await ready;
  return { close: () => socket.destroy() };
}
