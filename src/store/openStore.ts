import type { Logger } from '../core/logger.js';
import type { LocalCacheStats } from './overLimitCache.js';
import { withLocalCache, withOverLimitCache } from './cachedStore.js';
import { createMemoryStore } from './memoryStore.js';
import { createRedisStore, type RedisAccess } from './redisStore.js';
import { createReferenceKeyStore } from './referenceKeyStore.js';
import type { CodePath, FunctionsSetting } from './functions.js';
import type { RedisSettings } from './redisSettings.js';
import type { Store } from './Store.js';
import { SINGLE_PROCESS, subscribeToRefunds, type Coherence } from './invalidation.js';
import { routeAuthWarnings } from './authWarnings.js';
import {
  createMemoryDemand,
  createRedisDemand,
  type DemandOptions,
  type DemandStore,
} from './demand.js';

/**
 * The store the settings ask for: Redis (single, Sentinel or Cluster) or this process's memory,
 * with the cache the settings ask for in front of it.
 */
export interface OpenedStore {
  store: Store;
  /** The reference's local-cache gauges, when COMPAT_MODE=reference keeps that cache. */
  localCacheStats: (() => LocalCacheStats) | undefined;
  /**
   * RLQS's demand store, beside the counters: on the store's Redis connection, or in this
   * process's memory (on the service's clock) when the counters are.
   */
  openDemand(options: DemandOptions): DemandStore;
  /**
   * Waits, briefly, for the first connection to Redis; rejects with a SettingsError when REDIS_URL
   * cannot work (its database cannot be selected), so that start-up stops. Memory: resolves.
   */
  firstConnection: () => Promise<void>;
  /** How decision calls go to Redis (functions or scripts); undefined in memory. */
  codePath: () => CodePath | undefined;
}

/** The settings the store reads. */
export interface StoreSettings {
  /** Undefined: this process's memory. */
  redis: RedisSettings | undefined;
  clock: 'redis' | 'local';
  clockSkewToleranceMs: number;
  redisBatchLimit: number;
  redisBatchWindowMs: number;
  redisFunctions: FunctionsSetting;
  cacheKeyPrefix: string;
  overLimitCacheSize: number;
  compatMode: 'off' | 'reference';
  /** COMPAT_KEYS=reference: the reference's own counters (referenceKeyStore.ts). */
  referenceKeys: { jitterMaxSeconds: number } | undefined;
}

export interface OpenStoreOptions {
  logger: Logger;
  /** The service's clock: the in-memory store's, and the caches' with CLOCK=local. */
  clock: () => number;
  /** The rules in force: a reload empties the caches. */
  rules: () => object;
}

/** How long start-up waits for the caches' subscription to refunds (see invalidation.ts). */
const FIRST_SUBSCRIPTION_MS = 2_000;

export function openStore(settings: StoreSettings, options: OpenStoreOptions): OpenedStore {
  const { logger, clock } = options;
  const redisStore = settings.redis
    ? createRedisStore(settings.redis, {
        onError: (error) => logger.debug({ err: error, kind: error.kind }, 'redis connection'),
        clockSkewToleranceMs: settings.clockSkewToleranceMs,
        batchLimit: settings.redisBatchLimit,
        batchWindowMs: settings.redisBatchWindowMs,
        keyPrefix: settings.cacheKeyPrefix,
        onSilentConnection: (silentMs, waiting) =>
          logger.warn(
            { silentMs, waiting },
            'redis answered nothing while calls waited; reconnecting to release them',
          ),
        onWarning: (message) => logger.warn(message),
        // The reference's keys take plain commands: no library to load, no path to tell.
        functions: settings.referenceKeys ? 'off' : settings.redisFunctions,
        onPath: (path) => {
          if (!settings.referenceKeys) logPath(logger, path, settings.redisFunctions);
        },
      })
    : undefined;
  if (redisStore && settings.referenceKeys) {
    logger.info(
      "redis: checks are decided by the reference's own commands on its keys (COMPAT_KEYS=reference)",
    );
  }
  const backend: Store =
    redisStore && settings.referenceKeys
      ? createReferenceKeyStore({
          redis: redisStore,
          jitterMaxSeconds: settings.referenceKeys.jitterMaxSeconds,
          probeKey: `${settings.cacheKeyPrefix}tollgate-probe`,
        })
      : (redisStore ?? createMemoryStore({ clock }));
  const redis = redisStore?.access;
  let coherence: Coherence = SINGLE_PROCESS;
  const firstConnection = async () => {
    await redisStore?.firstConnection();
    // Briefly: a cache that is not yet hearing other processes' refunds answers nothing, which
    // is safe, but a service that serves from the first request with its cache on is expected.
    await coherence.firstLive(FIRST_SUBSCRIPTION_MS);
  };
  // The reference's keys take plain commands, neither functions nor scripts.
  const codePath = () => (settings.referenceKeys ? undefined : redisStore?.codePath());
  const openDemand = (demandOptions: DemandOptions): DemandStore =>
    redis ? createRedisDemand(redis, demandOptions) : createMemoryDemand(demandOptions, clock);
  const opened = { openDemand, firstConnection, codePath };
  const size = settings.overLimitCacheSize;
  const reference = settings.compatMode === 'reference';
  // The exact cache is off on a cluster: a denial that spans slots refunds what it took, so a
  // count may fall early. Reference counting never takes back a denial, so the reference's local
  // cache stays on there, as the reference's does.
  const cached = size > 0 && (reference || settings.redis?.type !== 'cluster');
  if (!cached) return { store: backend, localCacheStats: undefined, ...opened };
  coherence = redis ? refundNotices(redis.connection, logger) : SINGLE_PROCESS;
  const cacheOptions = {
    size,
    // The clock the store's resets run on: Redis TIME runs at the rate of a monotonic clock.
    clock: settings.redis && settings.clock === 'redis' ? () => performance.now() : clock,
    rules: options.rules,
    coherence,
  };
  const closing = (store: Store): Store => ({
    ...store,
    close: () => Promise.all([coherence.close(), store.close()]).then(() => undefined),
  });
  if (reference) {
    const store = withLocalCache(backend, cacheOptions);
    return { store: closing(store), localCacheStats: () => store.localCacheStats(), ...opened };
  }
  return {
    store: closing(withOverLimitCache(backend, cacheOptions)),
    localCacheStats: undefined,
    ...opened,
  };
}

/** Other processes' refunds, heard over Redis (see invalidation.ts). */
function refundNotices(connection: RedisAccess['connection'], logger: Logger): Coherence {
  return subscribeToRefunds({
    connection,
    // The store's own connection has said it already, once.
    prepare: (node) => routeAuthWarnings(node, () => undefined),
    onRefused: (reason) =>
      logger.warn(
        { reason },
        "redis: the caches answer nothing, since they cannot hear of other processes' refunds",
      ),
  });
}

/** The calls' path, once chosen: a warning when Redis refused functions that were not turned off. */
function logPath(logger: Logger, path: CodePath, setting: FunctionsSetting): void {
  if (path.kind === 'functions') {
    logger.info(
      { library: path.detail },
      'redis: checks are decided by FCALL of the function library',
    );
  } else if (setting === 'on') {
    logger.error(
      { reason: path.detail },
      'redis: refused functions; checks are decided by EVALSHA',
    );
  } else {
    logger.warn({ reason: path.detail }, 'redis: checks are decided by EVALSHA, not functions');
  }
}
