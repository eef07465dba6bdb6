import type { Check, Decision, HeaderReader } from './check.js';
import { PACKAGE_VERSION } from './version.js';
import { InvalidRequestError, NoRulesError, SettingsError, StoreError } from './errors.js';
import { createServerCredentials } from './grpc/credentials.js';
import { createGrpcServer, routeGrpcLogs } from './grpc/server.js';
import { grpcServerOptions, guardOptions } from './grpc/serverOptions.js';
import { createHttpServer } from './http/server.js';
import { createLimiter } from './decision/limiter.js';
import { createLogger, type Logger } from './logger.js';
import { createMetrics, type Metrics, type RpcOutcome } from './metrics.js';
import { dumpRules } from './rules/dumpRules.js';
import { createRulesLoader } from './rules/loadOffThread.js';
import { loadRules } from './rules/loadRules.js';
import type { RuleSet } from './rules/types.js';
import { watchRules, type RulesWatcher } from './rules/watchRules.js';
import { startXdsClient, type XdsClient } from './rules/xdsClient.js';
import type { Settings } from './settings.js';
import { createMemoryStore } from './store/memoryStore.js';
import { createRedisStore } from './store/redisStore.js';
import { withLocalCache, withOverLimitCache } from './store/cachedStore.js';
import type { Store } from './store/Store.js';
import { countRules, describeStore, ignoredReferenceSettings } from './startupReport.js';
import { createStatsd, withStatsd } from './statsd.js';
import { createTracing } from './tracing.js';

/**
 * The wiring: rules (with hot reload), store, limiter, metrics, tracing, and the gRPC and HTTP
 * servers, built from Settings. Tests call this directly, with an injected clock, instead of
 * spawning the entry point.
 */
export interface ServiceOptions {
  settings: Settings;
  /** The service's clock: used by the in-memory store, and passed to Redis with CLOCK=local. */
  clock?: () => number;
  logger?: Logger;
  /** The OTEL_* variables for tracing; process.env by default. */
  env?: Record<string, string | undefined>;
  /** How often the store's health is probed. */
  healthIntervalMs?: number;
  /** Where checks are counted; a new registry by default. */
  metrics?: Metrics;
  /** What GET /metrics answers; `metrics` alone by default. A worker answers every worker's sum. */
  metricsExposition?: () => Promise<{ contentType: string; body: string }>;
}

export interface Service {
  /** Listens and resolves with the bound ports (gRPC 0 when on a Unix socket). */
  start(): Promise<{ grpcPort: number; httpPort: number }>;
  /** Health turns NOT_SERVING, in-flight calls finish (within graceMs), then everything closes. */
  stop(graceMs?: number): Promise<void>;
  /** Loads the rules again now, changed or not (SIGHUP); the current rules serve meanwhile. */
  reload(): void;
}

/**
 * A port that cannot be bound, as a SettingsError naming the setting: main prints it as
 * `tollgate: MESSAGE` and exits 1, as for any bad setting, with no stack.
 */
function listenError(setting: string, address: string, error: unknown): SettingsError {
  const text = error instanceof Error ? error.message : String(error);
  const code = (error as NodeJS.ErrnoException).code ?? /\b(E[A-Z]+)\b/.exec(text)?.[1];
  const why =
    code === 'EADDRINUSE'
      ? 'is in use by another process'
      : code === 'EACCES'
        ? 'needs privileges this process lacks (a port below 1024?)'
        : code === 'EADDRNOTAVAIL'
          ? 'is not an address of this host'
          : `cannot be listened on: ${text}`;
  return new SettingsError(`${setting}: ${address} ${why}`, { cause: error });
}

/**
 * Why POST /json refuses checks, or undefined when it serves them. While gRPC requires client
 * certificates, the plain HTTP port would let anyone spend the quotas that only certified callers
 * may: it refuses unless HTTP_JSON=on says to serve it anyway.
 */
function jsonRefusal(settings: Settings): string | undefined {
  if (settings.http.json === 'on') return undefined;
  if (settings.http.json === 'off') return 'POST /json is off (HTTP_JSON=off)';
  if (settings.grpcServer.tls?.clientCaPath === undefined) return undefined;
  return (
    'POST /json is off while gRPC requires client certificates (GRPC_CLIENT_TLS_CACERT), ' +
    'which this plain HTTP port cannot ask for; HTTP_JSON=on serves it anyway'
  );
}

/** A version as logs and /rlconfig show it: the management server's text, bounded. */
function shortVersion(version: string): string {
  return version.length > 128 ? `${version.slice(0, 128)}…` : version;
}

/** Store errors that mean Redis cannot be reached or cannot serve now; the rest are refusals. */
const UNREACHABLE_KINDS = new Set(['timeout', 'connection', 'unavailable']);

export function createService(options: ServiceOptions): Service {
  const { settings } = options;
  const clock = options.clock ?? Date.now;
  const logger = options.logger ?? createLogger(settings);
  const baseMetrics =
    options.metrics ??
    createMetrics({
      maxDetailedSeries: settings.metrics.maxDetailedSeries,
      referenceLabels: settings.compatMode === 'reference',
    });
  const statsd =
    settings.statsd &&
    createStatsd(settings.statsd, {
      maxDetailedSeries: settings.metrics.maxDetailedSeries,
      onError: (error) =>
        logger.warn({ err: error }, 'statsd: sending stats failed; they are dropped meanwhile'),
      onDroppedFlush: () => baseMetrics.statsdFlushDropped(),
    });
  const metrics = withStatsd(baseMetrics, statsd);
  const tracing = createTracing({ env: options.env ?? process.env });

  const loadOptions = {
    defaultAlgorithm: settings.defaultAlgorithm,
    mergeDomainConfig: settings.mergeDomainConfig,
  };
  const xds = settings.xds;
  // The one reference every check reads: a reload swaps it whole, so no check sees half a config.
  // Over xDS there is none until the management server sends the first.
  let rules: RuleSet | undefined;
  if (xds === undefined) {
    rules = loadRules(settings.configPath, loadOptions);
    metrics.configLoad(true);
    logger.info(
      { configPath: settings.configPath, domains: [...rules.domains.keys()] },
      'rules loaded',
    );
  }
  const currentRules = (): RuleSet => {
    if (rules !== undefined) return rules;
    throw new NoRulesError(
      `no rate limit configuration is loaded yet: waiting for the xDS management server at ${xds?.serverUrl ?? '?'}`,
    );
  };
  const backend: Store = settings.redis
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
      })
    : createMemoryStore({ clock });
  // The clock the store's resets run on: Redis TIME, or this one (CLOCK=local, in-memory store).
  const cacheOptions = {
    size: settings.overLimitCacheSize,
    clock: settings.redis && settings.clock === 'redis' ? () => performance.now() : clock,
    rules: currentRules,
  };
  let store = backend;
  if (settings.overLimitCacheSize > 0 && settings.compatMode === 'reference') {
    // Reference counting never refunds, so compatibility mode's cache stays on a cluster too, as
    // the reference's does.
    const cached = withLocalCache(backend, cacheOptions);
    metrics.localCache(() => cached.localCacheStats());
    statsd?.localCache(() => cached.localCacheStats());
    store = cached;
  } else if (settings.overLimitCacheSize > 0 && settings.redis?.type !== 'cluster') {
    // The exact cache is off on a cluster: a denial that spans slots refunds what it took, so a
    // count may fall early.
    store = withOverLimitCache(backend, cacheOptions);
  }

  // An outage under load fails every check: one line a second says so, with how many it stands for.
  let lastStoreLog = 0;
  let unlogged = 0;
  const logStoreError = (error: StoreError) => {
    const now = Date.now();
    if (now - lastStoreLog < 1_000) {
      unlogged += 1;
      return;
    }
    logger.warn(
      { kind: error.kind, failureMode: settings.failureMode, alsoFailedSinceLastLine: unlogged },
      error.message,
    );
    lastStoreLog = now;
    unlogged = 0;
  };

  const limiter = createLimiter({
    rules: currentRules,
    store,
    clock: settings.clock === 'local' ? clock : undefined,
    defaultAlgorithm: settings.defaultAlgorithm,
    keyPrefix: settings.cacheKeyPrefix,
    failureMode: settings.failureMode,
    shadowMode: settings.shadowMode,
    quotaMode: settings.quotaMode,
    ietfHeaders: settings.rateLimitHeaders === 'ietf',
    dynamicMetadata: settings.responseDynamicMetadata,
    referenceHeaders: settings.limitHeaders.enabled ? settings.limitHeaders : undefined,
    nearLimitRatio: settings.metrics.nearLimitRatio,
    referenceCounting:
      settings.compatMode === 'reference'
        ? { stop: settings.stopIncrementWhenOverLimit }
        : undefined,
    wholeSecondResets: settings.compatMode === 'reference',
    observe: (event) => {
      metrics.observe(event);
      tracing.observe(event);
      if (event.storeError) logStoreError(event.storeError);
    },
  });

  /** One check, from either server: traced in the caller's trace, and timed by its outcome. */
  async function decide<C>(
    check: Check,
    headers: C,
    readHeader: HeaderReader<C>,
  ): Promise<Decision> {
    const started = performance.now();
    let outcome: RpcOutcome = 'internal';
    try {
      // Untraced, a check costs no closure: neither its run nor its header reader is made.
      const decision = await (tracing.enabled
        ? tracing.traceCheck(
            () => limiter.decide(check),
            (name) => readHeader(headers, name),
          )
        : limiter.decide(check));
      outcome = decision.code === 'OK' ? 'ok' : 'over_limit';
      return decision;
    } catch (error) {
      if (error instanceof InvalidRequestError) outcome = 'invalid';
      else if (error instanceof StoreError || error instanceof NoRulesError)
        outcome = 'unavailable';
      throw error;
    } finally {
      metrics.observeLatency((performance.now() - started) / 1000, outcome);
    }
  }

  const limits = {
    maxDescriptors: settings.maxDescriptors,
    maxEntries: settings.maxEntries,
    maxEntryBytes: settings.maxEntryBytes,
    limitOverrides: settings.limitOverrides,
    emptyDescriptors: settings.compatMode === 'reference',
  };
  const onInternalError = (error: unknown) =>
    logger.error({ err: error }, 'internal error answering a check');
  const onInvalidRequest = () => metrics.invalidRequest();
  routeGrpcLogs((line) => logger.warn({ source: 'grpc-js' }, line));
  const grpcServer = createGrpcServer({
    decide,
    limits,
    onInternalError,
    onInvalidRequest,
    serverOptions: grpcServerOptions(settings.grpcServer),
    fastPath: settings.grpcServer.fastPath,
    clientSan: settings.grpcServer.tls?.clientSan,
    guard: {
      ...guardOptions(settings.grpcServer),
      onBound: (bound) => metrics.boundReached(`grpc_${bound}`),
    },
    credentials: createServerCredentials(settings.grpcServer.tls, {
      onReloadError: (error) =>
        logger.error({ err: error }, 'TLS files not reloaded; serving the previous ones'),
    }),
  });

  // Health says whether checks can be decided, as the probe last found: it runs a check's whole
  // path (see Store.probe), so a Redis user without a command checks need is found, not only an
  // unreachable Redis. With FAILURE_MODE=error no check can be answered then, so health says
  // NOT_SERVING and Envoy's health checking can route around this instance. With allow or deny,
  // the service still gives its configured answer and stays SERVING. The reason names the cause.
  let storeProblem: StoreError | undefined;
  let draining = false;
  // Until both servers listen: a process whose HTTP port turns out to be taken exits, and must
  // not have said SERVING on its gRPC port a moment before.
  let listening = false;
  const health = () => {
    if (draining) return { serving: false, reason: 'NOT_SERVING: draining' };
    if (!listening) return { serving: false, reason: 'NOT_SERVING: starting' };
    if (rules === undefined && xds?.healthyWithConfigOnly) {
      return {
        serving: false,
        reason:
          'NOT_SERVING: no rate limit configuration is loaded yet (HEALTHY_WITH_AT_LEAST_ONE_CONFIG_LOADED=true)',
      };
    }
    if (storeProblem === undefined) return { serving: true, reason: 'OK' };
    const what = UNREACHABLE_KINDS.has(storeProblem.kind)
      ? 'store unreachable'
      : 'store refuses checks';
    if (settings.failureMode === 'error') {
      return {
        serving: false,
        reason: `NOT_SERVING: ${what} (FAILURE_MODE=error): ${storeProblem.message}`,
      };
    }
    return {
      serving: true,
      reason: `OK: ${what}, answering per FAILURE_MODE=${settings.failureMode}: ${storeProblem.message}`,
    };
  };
  const updateHealth = () => grpcServer.setServing(health().serving);

  const httpServer = createHttpServer({
    decide,
    health,
    metrics:
      options.metricsExposition ??
      (async () => ({ contentType: metrics.contentType, body: await metrics.text() })),
    rules: () => {
      const lines = rules === undefined ? [] : dumpRules(rules);
      if (xds === undefined) return lines;
      const applied = xdsClient?.version;
      const version = applied === undefined ? 'none yet' : `'${shortVersion(applied)}'`;
      return [`# source: xds ${xds.serverUrl}, version ${version}`, ...lines];
    },
    limits,
    onInternalError,
    onInvalidRequest,
    jsonRefusal: jsonRefusal(settings),
    bounds: settings.http,
    onConnectionRefused: () => metrics.boundReached('http_connections'),
  });

  let probing = false;
  const probe = async () => {
    if (probing) return;
    probing = true;
    const problem = await store.probe(settings.clock === 'local' ? clock() : undefined).then(
      () => undefined,
      (error: unknown) => (error instanceof StoreError ? error : undefined),
    );
    probing = false;
    if (problem?.message === storeProblem?.message) return;
    const before = storeProblem;
    storeProblem = problem;
    if (problem === undefined) logger.info('store decides checks again');
    else {
      logger.error(
        { kind: problem.kind, failureMode: settings.failureMode, reason: problem.message },
        UNREACHABLE_KINDS.has(problem.kind)
          ? 'store unreachable'
          : 'store refuses checks: no check can be decided until this is fixed',
      );
    }
    if ((before === undefined) !== (problem === undefined)) updateHealth();
  };
  let probeTimer: NodeJS.Timeout | undefined;

  // Last, so that nothing above can fail and leave a watcher running. Reloads load off this
  // thread: parsing a large file takes seconds, which calls must not wait for.
  const loader = createRulesLoader();
  const watcher: RulesWatcher | undefined = xds
    ? undefined
    : watchRules({
        path: settings.configPath,
        load: () => loader.load({ kind: 'files', configPath: settings.configPath }, loadOptions),
        pollIntervalMs: settings.configPollIntervalMs,
        settleMs: settings.configSettleMs,
        onReload: (next) => {
          rules = next;
          metrics.configLoad(true);
          logger.info({ domains: [...next.domains.keys()] }, 'rules reloaded');
        },
        onError: (error) => {
          metrics.configLoad(false);
          logger.error({ err: error }, 'rules reload failed; the previous rules stay in force');
        },
      });

  let xdsClient: XdsClient | undefined;
  const inForce = () => {
    const applied = xdsClient?.version;
    return applied === undefined ? 'none' : shortVersion(applied);
  };
  /** Starts the xDS client; resolves once the first configuration is applied. */
  const startXds = (settingsXds: NonNullable<typeof xds>): Promise<void> =>
    new Promise((resolve) => {
      xdsClient = startXdsClient({
        settings: settingsXds,
        version: PACKAGE_VERSION,
        load: async (source) => {
          const next = await loader.load(source, loadOptions);
          const inForceDomains = rules?.domains.size ?? 0;
          if (settingsXds.refuseEmptyUpdate && next.domains.size === 0 && inForceDomains > 0) {
            throw new Error(
              `the update has no rules, and would remove all ${inForceDomains} domains in force ` +
                '(XDS_REFUSE_EMPTY_UPDATE=true refuses it)',
            );
          }
          return next;
        },
        onApplied: (next, version) => {
          const first = rules === undefined;
          const shown = shortVersion(version);
          if (next.domains.size === 0) {
            const dropped = [...(rules?.domains.keys() ?? [])];
            logger.warn(
              { version: shown, droppedDomains: dropped.length, dropped: dropped.slice(0, 20) },
              'xds update has no rules: every domain is unlimited until the next one',
            );
          }
          rules = next;
          metrics.configLoad(true);
          metrics.rulesVersion('xds', shown);
          logger.info({ version: shown, domains: [...next.domains.keys()] }, 'xds rules applied');
          if (first) {
            updateHealth();
            resolve();
          }
        },
        onRejected: (error, version) => {
          metrics.configLoad(false);
          logger.error(
            { err: error, version: shortVersion(version), inForce: inForce() },
            'xds rules refused (NACK); the previous rules stay in force',
          );
        },
        onStream: ({ connected, error, retryInMs }) => {
          if (connected) logger.info({ server: settingsXds.serverUrl }, 'xds stream open');
          else {
            logger.warn(
              {
                server: settingsXds.serverUrl,
                err: error,
                retryInMs,
                inForce: inForce(),
              },
              'xds stream lost; serving the rules in force and reconnecting',
            );
          }
        },
      });
    });

  return {
    async start() {
      if (xds) {
        const first = startXds(xds);
        if (!xds.forceStart) {
          logger.info(
            { server: xds.serverUrl, nodeId: xds.nodeId },
            'waiting for the first rules from the xds management server before serving ' +
              '(FORCE_START_WITHOUT_INITIAL_CONFIG=true serves at once)',
          );
          await first;
        }
      }
      await probe();
      probeTimer = setInterval(() => void probe(), options.healthIntervalMs ?? 1_000);
      probeTimer.unref();
      updateHealth();
      const grpcAddress = settings.grpcUds ?? `${settings.grpcHost}:${settings.grpcPort}`;
      const grpcPort = await (
        settings.grpcUds
          ? grpcServer.listen(`unix:${settings.grpcUds}`)
          : grpcServer.listen(settings.grpcHost, settings.grpcPort)
      ).catch((error: unknown) => {
        throw listenError(settings.grpcUds ? 'GRPC_UDS' : 'GRPC_PORT', grpcAddress, error);
      });
      const httpPort = await httpServer
        .listen(settings.host, settings.port)
        .catch((error: unknown) => {
          throw listenError('PORT', `${settings.host}:${settings.port}`, error);
        });
      listening = true;
      updateHealth();
      const loaded = rules ? countRules(rules) : { domains: 0, rules: 0 };
      logger.info(
        {
          grpc: settings.grpcUds ?? `${settings.grpcHost}:${grpcPort}`,
          http: `${settings.host}:${httpPort}`,
          store: describeStore(settings),
          rules: {
            source: xds ? `xds ${xds.serverUrl} (node ${xds.nodeId})` : settings.configPath,
            ...loaded,
          },
          failureMode: settings.failureMode,
          ...(settings.redis ? { redisTimeoutMs: settings.redis.timeoutMs } : {}),
          compatMode: settings.compatMode,
          // The reference sends statsd unless told not to; tollgate only when asked.
          statsd: settings.statsd
            ? `${settings.statsd.protocol}://${settings.statsd.host}:${settings.statsd.port}`
            : 'off (USE_STATSD=true to send it; the reference sends it by default)',
        },
        'listening',
      );
      if (settings.redis === undefined) {
        logger.warn(
          'REDIS_URL is unset: counters are kept in this process only, and other instances ' +
            'or workers do not share them',
        );
      }
      for (const warning of ignoredReferenceSettings(options.env ?? process.env)) {
        logger.warn(warning);
      }
      return { grpcPort, httpPort };
    },

    reload() {
      watcher?.reload();
    },

    async stop(graceMs = settings.shutdownGraceMs) {
      draining = true;
      updateHealth();
      clearInterval(probeTimer);
      watcher?.close();
      xdsClient?.close();
      void loader.close();
      await Promise.all([grpcServer.shutdown(graceMs), httpServer.close(graceMs)]);
      // Each bounds its own wait (half a second), and they wait side by side.
      await Promise.all([tracing.shutdown(), statsd?.close()]);
      await store.close();
    },
  };
}
