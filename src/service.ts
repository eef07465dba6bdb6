import { createGrpcServer } from './grpc/server.js';
import { createLimiter } from './limiter.js';
import { createLogger, type Logger } from './logger.js';
import { loadRules } from './rules/loadRules.js';
import type { Settings } from './settings.js';
import { createMemoryStore } from './store/memoryStore.js';
import { createRedisStore } from './store/redisStore.js';
import type { Store } from './store/Store.js';

/**
 * The wiring: rules, store, limiter and gRPC server, built from Settings. Tests call this
 * directly, with an injected clock, instead of spawning the entry point.
 */
export interface ServiceOptions {
  settings: Settings;
  /** The service's clock: used by the in-memory store, and passed to Redis with CLOCK=local. */
  clock?: () => number;
  logger?: Logger;
  /** How often the store's health is probed. */
  healthIntervalMs?: number;
}

export interface Service {
  /** Listens and resolves with the bound gRPC port (0 when on a Unix socket). */
  start(): Promise<{ grpcPort: number }>;
  /** Health turns NOT_SERVING, in-flight calls finish (within graceMs), the store closes. */
  stop(graceMs?: number): Promise<void>;
}

export function createService(options: ServiceOptions): Service {
  const { settings } = options;
  const clock = options.clock ?? Date.now;
  const logger = options.logger ?? createLogger(settings);
  const rules = loadRules(settings.configPath, { defaultAlgorithm: settings.defaultAlgorithm });
  logger.info(
    { configPath: settings.configPath, domains: [...rules.domains.keys()] },
    'rules loaded',
  );

  let storeHealthy = true;
  let draining = false;
  const store: Store = settings.redis
    ? createRedisStore(settings.redis, {
        onError: (error) => logger.debug({ err: error, kind: error.kind }, 'redis connection'),
      })
    : createMemoryStore({ clock });

  const limiter = createLimiter({
    rules: () => rules,
    store,
    clock: settings.clock === 'local' ? clock : undefined,
    defaultAlgorithm: settings.defaultAlgorithm,
    keyPrefix: settings.cacheKeyPrefix,
    failureMode: settings.failureMode,
    shadowMode: settings.shadowMode,
    dynamicMetadata: settings.responseDynamicMetadata,
    referenceHeaders: settings.limitHeaders.enabled ? settings.limitHeaders : undefined,
    nearLimitRatio: settings.metrics.nearLimitRatio,
    observe: (event) => {
      const error = event.storeError;
      if (error)
        logger.warn({ kind: error.kind, failureMode: settings.failureMode }, error.message);
    },
  });

  const server = createGrpcServer({
    decide: (check) => limiter.decide(check),
    onInternalError: (error) => logger.error({ err: error }, 'internal error answering a check'),
    limits: {
      maxDescriptors: settings.maxDescriptors,
      maxEntries: settings.maxEntries,
      maxEntryBytes: settings.maxEntryBytes,
    },
  });

  // With FAILURE_MODE=error an unreachable store means every check fails, so health says so and
  // Envoy's health checking can route around this instance. With allow or deny, the service still
  // gives its configured answer and stays SERVING.
  const updateHealth = () =>
    server.setServing(!draining && (storeHealthy || settings.failureMode !== 'error'));
  const probe = async () => {
    const healthy = await store.ping().then(
      () => true,
      () => false,
    );
    if (healthy !== storeHealthy) {
      storeHealthy = healthy;
      if (healthy) logger.info('store reachable');
      else logger.error({ failureMode: settings.failureMode }, 'store unreachable');
      updateHealth();
    }
  };
  let probeTimer: NodeJS.Timeout | undefined;

  return {
    async start() {
      await probe();
      probeTimer = setInterval(() => void probe(), options.healthIntervalMs ?? 1_000);
      probeTimer.unref();
      updateHealth();
      const grpcPort = settings.grpcUds
        ? await server.listen(`unix:${settings.grpcUds}`)
        : await server.listen(settings.grpcHost, settings.grpcPort);
      logger.info({ grpc: settings.grpcUds ?? `${settings.grpcHost}:${grpcPort}` }, 'listening');
      return { grpcPort };
    },

    async stop(graceMs = 10_000) {
      draining = true;
      updateHealth();
      clearInterval(probeTimer);
      await server.shutdown(graceMs);
      await store.close();
    },
  };
}
