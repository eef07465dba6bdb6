import { X509Certificate } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { createSecureContext, type ConnectionOptions } from 'node:tls';
import { Cluster, Redis, type RedisOptions } from 'ioredis';
import { SettingsError, type StoreError } from '../core/errors.js';
import type { RedisSettings, RedisTls } from './redisSettings.js';
import { createClusterStore, type SlotBackend } from './clusterStore.js';
import type { Store } from './Store.js';
import { createBatcher } from './batcher.js';
import { withDeadline } from './deadline.js';
import { createSilenceWatch } from './silence.js';
import { classifyRedisError as classify } from './redisErrors.js';
import { probeKey } from './keys.js';
import {
  batchCall,
  decideCall,
  probeArgs,
  readDecision,
  type ScriptArgs,
  type ScriptCall,
} from './script.js';
import {
  createDecisionCalls,
  type CodePath,
  type DecisionCalls,
  type FunctionsSetting,
} from './functions.js';
import { keySlot } from './slots.js';
import { watchConnection, type ConnectionWatch } from './connectionWatch.js';
import { routeAuthWarnings } from './authWarnings.js';

/**
 * The Redis store: each request decided in one call of the decision code (see lua/dispatch.lua),
 * or of the cheaper plain fixed-window code when every counter of it is a plain fixed window (see
 * lua/plain_fixed_window.lua), which requests arriving together share (see batcher.ts), on a
 * single Redis, on the master that Sentinel names, or on Redis Cluster (see clusterStore.ts). A
 * call is an FCALL of tollgate's function library, or an EVALSHA where Redis refuses functions
 * (see functions.ts).
 *
 * ioredis's defaults suit a cache, not a limiter in a request's critical path: it would queue
 * commands while disconnected and retry them, so a call could outlive Envoy's 20 ms deadline. Here
 * nothing is queued or retried, every call is bounded by REDIS_TIMEOUT, and FAILURE_MODE decides
 * what a failure answers. A restart, a failover, SCRIPT FLUSH or FUNCTION FLUSH costs no failed
 * request: ioredis sends EVAL after a NOSCRIPT by itself, and a call that finds the library
 * missing loads it again (see functions.ts).
 */
export interface RedisStoreOptions {
  onError?: (error: StoreError) => void;
  /**
   * CLOCK_SKEW_TOLERANCE: when the service passes its clock, counters are kept this much longer
   * than their windows (see lua/dispatch.lua). 0 by default.
   */
  clockSkewToleranceMs?: number;
  /**
   * REDIS_BATCH_LIMIT: decide calls made in the same event-loop turn go as one script call of at
   * most this many requests (see batcher.ts). 1, the default here, sends each on its own. On
   * Redis Cluster, requests are batched with others of their slot (see clusterStore.ts).
   */
  batchLimit?: number;
  /** How long a check may wait for others to share its call (see batcher.ts). */
  batchWindowMs?: number;
  /** CACHE_KEY_PREFIX: the health probe's counter lives under it, as every counter does. */
  keyPrefix?: string;
  /** Told when a silent connection is dropped and opened again (see silence.ts). */
  onSilentConnection?: (silentMs: number, waiting: number) => void;
  /** What ioredis would print to the console itself (see authWarnings.ts), as one line each. */
  onWarning?: (message: string) => void;
  /** REDIS_FUNCTIONS: whether calls go as functions (see functions.ts). 'auto' by default. */
  functions?: FunctionsSetting;
  /** Told once calls' path is chosen, at the first connection that answers. */
  onPath?: (path: CodePath) => void;
}

/**
 * A call bounded by REDIS_TIMEOUT (and, on a single connection, watched for silence, and not sent
 * at all on a connection whose SELECT failed).
 */
type Bounded = <T>(send: () => Promise<T>) => Promise<T>;

type Explain = (error: unknown) => StoreError;

/**
 * Calls of another kind on the store's own connection, bounded by REDIS_TIMEOUT and failing with
 * the StoreError a check would get: RLQS's demand (store/demand.ts) runs on it.
 */
export interface RedisAccess {
  readonly connection: Redis | Cluster;
  call<T>(run: (connection: Redis | Cluster) => Promise<T>): Promise<T>;
}

export type RedisStore = Store & {
  readonly access: RedisAccess;
  /** How decision calls go now: functions or scripts (see functions.ts). */
  codePath(): CodePath;
  /**
   * Waits for the first connection, briefly, and rejects with a SettingsError when REDIS_URL
   * cannot work on it: its database cannot be selected. Any other outcome resolves.
   */
  firstConnection(): Promise<void>;
};

export function createRedisStore(
  settings: RedisSettings,
  options: RedisStoreOptions = {},
): RedisStore {
  if (settings.type === 'cluster') {
    const backend = clusterBackend(settings, options);
    const store = createClusterStore(backend, {
      timeoutMs: settings.timeoutMs,
      clockSkewToleranceMs: options.clockSkewToleranceMs ?? 0,
      classify,
      onError: options.onError,
      batchLimit: options.batchLimit,
      batchWindowMs: options.batchWindowMs,
    });
    const access: RedisAccess = {
      connection: backend.cluster,
      call: (run) =>
        withDeadline(run(backend.cluster), settings.timeoutMs).catch((error: unknown) => {
          throw classify(error);
        }),
    };
    return {
      ...store,
      access,
      codePath: () => backend.calls.path(),
      // Only database 0 exists on a cluster: nothing to select; the calls' path is chosen.
      firstConnection: () => backend.choosePath(1_000 + connectTimeout(settings)),
    };
  }
  const { redis, watch } = connectRedis(settings, options);
  const { explain, answered } = watchConnectionErrors(redis, watch, options.onError);
  const calls = createDecisionCalls(
    { client: redis, primaries: () => [redis] },
    options.functions ?? 'auto',
    options.onPath,
  );
  const bounded = boundCalls(redis, watch, settings.timeoutMs, answered, options);
  const choosePath = () => calls.choose(bounded);
  // A connection that answers chooses the path, if none did before (see functions.ts).
  redis.on('ready', () => void choosePath().catch(() => undefined));

  const access: RedisAccess = {
    connection: redis,
    call: (run) =>
      bounded(() => run(redis)).catch((error: unknown) => {
        throw explain(error);
      }),
  };

  return {
    access,
    codePath: () => calls.path(),
    decide: batchedDecide(calls, bounded, explain, options),

    reset: (keys: readonly string[]) =>
      countKeys(keys, (all) => redis.del(...all), bounded, explain),

    exists: (keys: readonly string[]) =>
      countKeys(keys, (all) => redis.exists(...all), bounded, explain),

    async firstConnection() {
      await watch.firstConnection(2 * connectTimeout(settings) + 500);
      // REDIS_FUNCTIONS=on stops start-up here when Redis refuses functions.
      if (redis.status === 'ready') await choosePath();
    },

    async ping() {
      try {
        if (redis.status === 'connecting' || redis.status === 'connect') await ready(redis, 1_000);
        await bounded(() => redis.ping());
      } catch (error) {
        throw explain(error);
      }
    },

    async probe(nowMs) {
      try {
        if (redis.status === 'connecting' || redis.status === 'connect') await ready(redis, 1_000);
        const args = probeArgs(probeKey(options.keyPrefix ?? ''), nowMs);
        for (const reply of await calls.probe(args, bounded)) readDecision(reply, 1);
      } catch (error) {
        throw explain(error);
      }
    },

    async close() {
      redis.disconnect();
    },
  };
}

/**
 * The connection to a single Redis or to the master Sentinel names, under fail-fast rules, with
 * each of its connections watched (see connectionWatch.ts). It connects once the watch is on.
 */
function connectRedis(
  settings: RedisSettings,
  options: RedisStoreOptions,
): { redis: Redis; watch: ConnectionWatch } {
  // The watch needs the client, and the client's retry strategy asks the watch.
  const late: { watch?: ConnectionWatch } = {};
  const redis = new Redis({
    ...(settings.type === 'sentinel' ? sentinelOptions(settings) : singleOptions(settings)),
    // The ready check sends INFO, which the least-privilege ACL user lacks (docs/redis.md). Without
    // it, a Redis still loading its data answers LOADING, which fails fast like any outage.
    enableReadyCheck: false,
    enableOfflineQueue: false,
    // Off, though it would halve the CPU spent writing to the socket under load: ioredis sends
    // the next pipeline only once the last is answered, so behind a stalled Redis a call would
    // wait out another call's timeout before its own began, twice REDIS_TIMEOUT in all.
    enableAutoPipelining: false,
    maxRetriesPerRequest: 0,
    // No commandTimeout: every call is bounded by withDeadline instead, which does not count the
    // service's own lateness against Redis.
    connectTimeout: connectTimeout(settings),
    // Keep reconnecting, never faster than every 50 ms nor slower than every second; every
    // second while SELECT fails, since ioredis counts each such connection a success.
    retryStrategy: (attempt) =>
      late.watch?.selectFailing() ? 1_000 : Math.min(50 * attempt, 1_000),
    lazyConnect: true,
  });
  const watch = watchConnection(redis, {
    db: settings.db,
    tls: settings.tls !== undefined,
    caCert: settings.tls?.caPath !== undefined,
    clientCert: settings.tls?.clientCertPath !== undefined,
    address: settings.path ?? `${settings.host}:${settings.port}`,
  });
  late.watch = watch;
  routeAuthWarnings(redis, (message) => options.onWarning?.(message));
  redis.connect().catch(() => undefined); // failures arrive as 'error' events
  return { redis, watch };
}

function connectTimeout(settings: RedisSettings): number {
  return Math.max(1_000, settings.timeoutMs);
}

/**
 * ioredis reports connection trouble as events; the calls themselves fail fast meanwhile. A call
 * made while there is no connection fails at once with ioredis's "not writeable": the reason
 * there is none (refused, wrong password, TLS) is the last connection error, which is what such a
 * call reports.
 */
interface ConnectionErrors {
  /** Any failure of a call, as the StoreError it reports. */
  explain: Explain;
  /** Connected and answered: an earlier connection error no longer explains anything. */
  answered: () => void;
}

function watchConnectionErrors(
  redis: Redis,
  watch: ConnectionWatch,
  onError: ((error: StoreError) => void) | undefined,
): ConnectionErrors {
  let connectionError: StoreError | undefined;
  redis.on('error', (error: Error) => {
    connectionError = watch.explain(error);
    onError?.(connectionError);
  });
  return {
    explain: (error) => {
      const classified = classify(error);
      return classified.kind === 'connection' && connectionError !== undefined && isUnsent(error)
        ? connectionError
        : classified;
    },
    answered: () => (connectionError = undefined),
  };
}

/**
 * Every call: refused before it is sent while the connection's SELECT failed, bounded by
 * REDIS_TIMEOUT, and watched for a silent connection (see silence.ts).
 */
function boundCalls(
  redis: Redis,
  watch: ConnectionWatch,
  timeoutMs: number,
  onAnswer: () => void,
  options: RedisStoreOptions,
): Bounded {
  const silentMs = Math.max(1_000, 4 * timeoutMs);
  const silence = createSilenceWatch(
    silentMs,
    (waiting) => {
      options.onSilentConnection?.(silentMs, waiting);
      // Destroyed, not ended: ending would wait for the silent server to close its side. ioredis
      // then fails the waiting calls and reconnects, as after any lost connection.
      redis.stream?.destroy();
    },
    onAnswer,
  );
  return (send) => {
    const refusal = watch.refusal();
    if (refusal) return Promise.reject(refusal);
    return withDeadline(silence.track(send()), timeoutMs, silence.timedOut);
  };
}

/** The per-call path: a request's checks go as one script call, alone or batched with others. */
function batchedDecide(
  calls: DecisionCalls,
  bounded: Bounded,
  explain: Explain,
  options: RedisStoreOptions,
): Store['decide'] {
  const skewToleranceMs = options.clockSkewToleranceMs ?? 0;
  const decide = (call: ScriptCall) => bounded(() => calls.run(call.script, call.args));
  return createBatcher({
    limit: options.batchLimit ?? 1,
    windowMs: options.batchWindowMs ?? 0,
    async sendOne(checks, nowMs) {
      try {
        const call = decideCall(checks, { nowMs, skewToleranceMs });
        return call.read(await decide(call));
      } catch (error) {
        throw explain(error);
      }
    },
    async sendBatch(requests) {
      const call = batchCall(requests, skewToleranceMs);
      let reply: unknown;
      try {
        reply = await decide(call);
      } catch (error) {
        throw explain(error);
      }
      // A request whose counter failed gets its error; the others their decisions.
      return call
        .read(reply)
        .map((decided) => (decided instanceof Error ? explain(decided) : decided));
    },
  });
}

/** DEL or EXISTS: one bounded call that answers how many of `keys` it found. */
async function countKeys(
  keys: readonly string[],
  command: (keys: readonly string[]) => Promise<number>,
  bounded: Bounded,
  explain: Explain,
): Promise<number> {
  if (keys.length === 0) return 0;
  try {
    return await bounded(() => command(keys));
  } catch (error) {
    throw explain(error);
  }
}

/** ioredis's refusal of a call it could not send: there was no connection to send it on. */
function isUnsent(error: unknown): boolean {
  const message = error instanceof Error ? error.message : '';
  return /^(Stream isn't writeable|Connection is closed)/.test(message);
}

function singleOptions(settings: RedisSettings): RedisOptions {
  return {
    ...(settings.path === undefined
      ? { host: settings.host, port: settings.port }
      : { path: settings.path }),
    username: settings.username,
    password: settings.password,
    db: settings.db,
    tls: settings.tls ? tlsOptions(settings.tls) : undefined,
  };
}

/**
 * The master as the sentinels name it. ioredis asks them again whenever it reconnects, and
 * listens for their +switch-master so that a failover moves it to the new master at once.
 */
function sentinelOptions(settings: RedisSettings): RedisOptions {
  const tls = settings.tls ? tlsOptions(settings.tls) : undefined;
  if (settings.masterName === undefined || !settings.nodes?.length) {
    throw new SettingsError('REDIS_URL: Sentinel needs the sentinels and the master name');
  }
  return {
    sentinels: settings.nodes,
    name: settings.masterName,
    username: settings.username,
    password: settings.password,
    db: settings.db,
    tls,
    enableTLSForSentinelMode: tls !== undefined,
    sentinelTLS: tls,
    sentinelCommandTimeout: Math.max(1_000, settings.timeoutMs),
    failoverDetector: true,
    // A master demoted by a failover answers writes with READONLY until the connection is
    // dropped: drop it, so that the next connection asks the sentinels for the new master.
    reconnectOnError: (error) => (/READONLY/.test(error.message) ? 1 : false),
  };
}

/**
 * ioredis's Cluster client under the same fail-fast rules: MOVED and ASK are followed at once,
 * TRYAGAIN, CLUSTERDOWN and a lost node are retried after a fifth of REDIS_TIMEOUT, and the cluster
 * store bounds every call by REDIS_TIMEOUT whatever the client is still trying.
 */
function clusterBackend(
  settings: RedisSettings,
  options: RedisStoreOptions,
): SlotBackend & {
  cluster: Cluster;
  calls: DecisionCalls;
  /** Waits up to `timeoutMs` for the slot map, then chooses the calls' path (see functions.ts). */
  choosePath(timeoutMs: number): Promise<void>;
} {
  const retryDelay = Math.max(1, Math.min(100, Math.floor(settings.timeoutMs / 5)));
  const cluster = new Cluster(settings.nodes ?? [{ host: settings.host, port: settings.port }], {
    redisOptions: {
      username: settings.username,
      password: settings.password,
      tls: settings.tls ? tlsOptions(settings.tls) : undefined,
      enableReadyCheck: false,
      maxRetriesPerRequest: 0,
      // The cluster store bounds each call instead (see deadline.ts).
      connectTimeout: Math.max(1_000, settings.timeoutMs),
    },
    // Nothing waits for the slot map: until it is known, calls fail fast.
    enableOfflineQueue: false,
    scaleReads: 'master',
    maxRedirections: 16,
    retryDelayOnMoved: 0,
    retryDelayOnFailover: retryDelay,
    retryDelayOnClusterDown: retryDelay,
    retryDelayOnTryAgain: retryDelay,
    slotsRefreshTimeout: Math.max(1_000, settings.timeoutMs),
    clusterRetryStrategy: (attempt) => Math.min(50 * attempt, 1_000),
    // Off: ioredis follows a redirection for a pipeline only when every command in it got the
    // same one, so calls pipelined beside a slot that is migrating would fail with MOVED or ASK.
    enableAutoPipelining: false,
  });
  const report = (error: Error) => options.onError?.(classify(error));
  cluster.on('error', report);
  cluster.on('node error', report);
  // On an ASK redirection ioredis sends ASKING and never looks at its reply. Refused (an ACL user
  // without +asking), that reply would be an unhandled rejection, which stops a Node process.
  // Heard here instead, it leaves the call to fail on its redirections like any other.
  const warned = new Set<string>();
  cluster.on('+node', (node: Redis) => {
    // Before the node connects: ioredis creates it with lazyConnect.
    routeAuthWarnings(node, (message) => options.onWarning?.(message), warned);
    const asking = node.asking.bind(node);
    node.asking = (...args: Parameters<Redis['asking']>) => {
      const sent = asking(...args);
      sent.catch(report);
      return sent;
    };
  });
  const calls = createDecisionCalls(
    {
      client: cluster,
      primaries: () => cluster.nodes('master'),
      nodeOf: (args) => primaryOf(cluster, args),
    },
    options.functions ?? 'auto',
    options.onPath,
  );
  const bounded: Bounded = (send) => withDeadline(send(), settings.timeoutMs);
  // A cluster that comes up after start-up chooses the path then (see functions.ts).
  cluster.on('ready', () => void calls.choose(bounded).catch(() => undefined));
  return {
    cluster,
    calls,
    async choosePath(timeoutMs) {
      if (cluster.status !== 'ready') await ready(cluster, timeoutMs);
      if (cluster.status === 'ready') await calls.choose(bounded);
    },
    run: (call) => calls.run(call.script, call.args),
    del: (keys) => withDeadline(cluster.del(...keys), settings.timeoutMs),
    exists: (keys) => withDeadline(cluster.exists(...keys), settings.timeoutMs),
    async ping() {
      if (cluster.status !== 'ready') await ready(cluster, 1_000);
      const masters = cluster.nodes('master');
      if (masters.length === 0) throw new Error('CLUSTERDOWN no master known yet');
      // Every master, since a request may need any of them.
      await Promise.all(masters.map((master) => withDeadline(master.ping(), settings.timeoutMs)));
    },
    async probe(nowMs) {
      if (cluster.status !== 'ready') await ready(cluster, 1_000);
      const keys = probeKeysPerMaster(cluster, options.keyPrefix ?? '');
      if (keys.length === 0) throw new Error('CLUSTERDOWN no master known yet');
      await Promise.all(
        keys.map(async (key) => {
          for (const reply of await calls.probe(probeArgs(key, nowMs), bounded)) {
            readDecision(reply, 1);
          }
        }),
      );
    },

    async close() {
      cluster.disconnect();
    },
  };
}

/** The primary the slot map names for a call's first key, if it has one. */
function primaryOf(cluster: Cluster, args: ScriptArgs): Redis | undefined {
  const [numKeys, key] = args;
  if (typeof numKeys !== 'number' || numKeys < 1 || key === undefined) return undefined;
  const owner = cluster.slots[keySlot(String(key))]?.[0];
  if (owner === undefined) return undefined;
  return cluster
    .nodes('master')
    .find((node) => `${node.options.host}:${node.options.port}` === owner);
}

/** A probe key on a slot of each master that the slot map names, so the probe reaches them all. */
function probeKeysPerMaster(cluster: Cluster, prefix: string): string[] {
  const owners = new Set<string>();
  for (const nodes of cluster.slots) if (nodes?.[0] !== undefined) owners.add(nodes[0]);
  const keys: string[] = [];
  for (let n = 0; owners.size > 0 && n < 100_000; n++) {
    const key = probeKey(prefix, n);
    const owner = cluster.slots[keySlot(key)]?.[0];
    if (owner !== undefined && owners.delete(owner)) keys.push(key);
  }
  return keys;
}

/** Reads the TLS files once, at start-up, so a bad path or a mismatched pair stops it. */
function tlsOptions(tls: RedisTls): ConnectionOptions {
  const read = (setting: string, path: string | undefined) => {
    if (path === undefined) return undefined;
    try {
      return readFileSync(path);
    } catch (error) {
      throw new SettingsError(`${setting}: cannot read '${path}': ${(error as Error).message}`);
    }
  };
  const options: ConnectionOptions = {
    ca: read('REDIS_TLS_CACERT', tls.caPath),
    cert: read('REDIS_TLS_CLIENT_CERT', tls.clientCertPath),
    key: read('REDIS_TLS_CLIENT_KEY', tls.clientKeyPath),
  };
  // Checked apart, so that the error names the setting at fault.
  try {
    // createSecureContext would take a CA file that holds no certificate at all.
    if (options.ca !== undefined) new X509Certificate(options.ca as Buffer);
  } catch (error) {
    throw new SettingsError(`REDIS_TLS_CACERT: not a certificate (${(error as Error).message})`);
  }
  try {
    createSecureContext({ cert: options.cert, key: options.key });
  } catch (error) {
    throw new SettingsError(
      `REDIS_TLS_CLIENT_CERT, REDIS_TLS_CLIENT_KEY: not a certificate and its key (${(error as Error).message})`,
    );
  }
  // The reference's REDIS_TLS_SKIP_HOSTNAME_VERIFICATION: the chain is still verified.
  if (tls.skipHostnameVerification) options.checkServerIdentity = () => undefined;
  return options;
}

/** Waits for a connection under way, so a probe right after start-up sees it. */
function ready(redis: Redis | Cluster, timeoutMs: number): Promise<void> {
  return new Promise((resolve) => {
    const done = () => {
      clearTimeout(timer);
      redis.off('ready', done);
      resolve();
    };
    const timer = setTimeout(done, timeoutMs);
    redis.once('ready', done);
  });
}
