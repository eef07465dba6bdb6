import { createLimiter } from '../decision/limiter.js';
import { describePath, type CodePath } from '../store/functions.js';
import { choosePolicy } from '../decision/policy.js';
import { createQuotaService } from '../rlqs/quotaService.js';
import type { RlqsSettings } from '../rlqs/rlqsSettings.js';
import type { RuleSet } from '../rules/types.js';
import { createRlqsService, type RlqsService } from '../servers/grpc/rlqsStream.js';
import type { Store } from '../store/Store.js';
import { createHealth } from './health.js';
import { createLogger, type Logger } from '../core/logger.js';
import type { Metrics } from '../observability/metrics.js';
import { createObservability } from '../observability/observe.js';
import type { Lookup } from '../observability/statsdAddress.js';
import { createRulesSource } from '../rules/rulesSource.js';
import { createServers, type ListeningPorts } from '../servers/servers.js';
import type { Settings } from './settings.js';
import { listeningReport, startupWarnings } from './startupReport.js';
import { openStore, type OpenedStore } from '../store/openStore.js';

/**
 * The composition of the service's parts, built from Settings: observability, the rule source,
 * the store with its caches, the limiter, health and the servers. Each part owns what it opens
 * and closes it. Tests call this directly, with an injected clock, instead of spawning the entry
 * point.
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
  /** How statsd looks STATSD_HOST up; node:dns's `lookup` by default. */
  statsdLookup?: Lookup;
}

export interface Service {
  /** Listens and resolves with the bound ports (gRPC 0 when on a Unix socket). */
  start(): Promise<ListeningPorts>;
  /** Health turns NOT_SERVING, in-flight calls finish (within graceMs), then everything closes. */
  stop(graceMs?: number): Promise<void>;
  /** Loads the rules again now, changed or not (SIGHUP); the current rules serve meanwhile. */
  reload(): void;
}

export function createService(options: ServiceOptions): Service {
  const { settings } = options;
  const clock = options.clock ?? Date.now;
  const env = options.env ?? process.env;
  const logger = options.logger ?? createLogger(settings);
  // Its settings, metrics and statsd lookup are the options'.
  const observability = createObservability({ ...options, logger, env });
  const { metrics } = observability;
  const rules = createRulesSource(settings, logger, {
    configLoad: (ok) => metrics.configLoad(ok),
    rulesVersion: (source, version) => metrics.rulesVersion(source, version),
    onFirstRules: () => updateHealth(),
  });
  const opened = openStore(settings, { logger, clock, rules: rules.current });
  const { store, localCacheStats } = opened;
  if (localCacheStats) observability.localCache(localCacheStats);
  const limiter = createLimiter({
    rules: rules.current,
    store,
    clock: settings.clock === 'local' ? clock : undefined,
    failureMode: settings.failureMode,
    ...modeOptions(settings),
    observe: (event) => observability.observe(event),
  });
  const health = createHealth({
    store,
    failureMode: settings.failureMode,
    clock: settings.clock === 'local' ? clock : undefined,
    rulesProblem: () => rules.unhealthy(),
    logger,
    onChange: () => updateHealth(),
  });
  const rlqs =
    settings.rlqs &&
    openRlqs(settings, settings.rlqs, { rules, store, opened, clock, metrics, logger });
  if (rlqs) metrics.rlqsStreams(rlqs);
  const servers = createServers({
    settings,
    decide: observability.checks((check) => limiter.decide(check)),
    health: () => health.state(),
    metrics:
      options.metricsExposition ??
      (async () => ({ contentType: metrics.contentType, body: await metrics.text() })),
    rlconfig: () => withCodePath(rules.dump(), opened.codePath()),
    logger,
    events: metrics,
    rlqs: rlqs?.handler,
  });
  function updateHealth(): void {
    servers.setServing(health.state().serving);
  }
  // Last, so that nothing above can fail and leave a watcher running.
  rules.watch();

  return {
    async start() {
      await rules.start();
      // A REDIS_URL that cannot work (a database that cannot be selected) stops start-up here.
      await opened.firstConnection();
      await health.start(options.healthIntervalMs ?? 1_000);
      updateHealth();
      const ports = await servers.listen();
      health.listening();
      const source = { source: rules.describe(), loaded: rules.loaded() };
      logger.info(withRedisCalls(listeningReport(settings, ports, source), opened), 'listening');
      if (settings.redis === undefined) {
        logger.warn(
          'REDIS_URL is unset: counters are kept in this process only, and other instances ' +
            'or workers do not share them',
        );
      }
      for (const warning of startupWarnings(settings, env)) logger.warn(warning);
      return ports;
    },

    reload() {
      rules.reload();
    },

    async stop(graceMs = settings.shutdownGraceMs) {
      health.drain();
      rules.close();
      // RLQS streams never finish by themselves: ended now, Envoy opens them again elsewhere.
      rlqs?.close();
      await servers.close(graceMs);
      await observability.close();
      await store.close();
    },
  };
}

/** RLQS: the quota service's sessions, served on gRPC streams with their bounds. */
function openRlqs(
  settings: Settings,
  rlqsSettings: RlqsSettings,
  parts: {
    rules: { current: () => RuleSet };
    store: Store;
    opened: OpenedStore;
    clock: () => number;
    metrics: Metrics;
    logger: Logger;
  },
): RlqsService {
  const { metrics, logger } = parts;
  const quota = createQuotaService({
    settings: rlqsSettings,
    rules: parts.rules.current,
    store: parts.store,
    openDemand: parts.opened.openDemand,
    plan: choosePolicy(modeOptions(settings)).plan,
    clock: settings.clock === 'local' ? parts.clock : undefined,
    onEvent: (event) => metrics.rlqs(event),
  });
  return createRlqsService({
    ...rlqsSettings,
    session: quota.session,
    onEvent: (event) => metrics.rlqs(event),
    onInternalError: (error) => logger.error({ err: error }, 'internal error answering RLQS'),
  });
}

/** /rlconfig's text, after a line saying how checks reach Redis (see store/functions.ts). */
async function withCodePath(dump: Promise<Buffer>, path: CodePath | undefined): Promise<Buffer> {
  if (path === undefined) return dump;
  return Buffer.concat([Buffer.from(`# redis calls: ${describePath(path)}\n`), await dump]);
}

/** The start-up report, with how checks reach Redis. */
function withRedisCalls(
  report: Record<string, unknown>,
  opened: { codePath(): CodePath | undefined },
): Record<string, unknown> {
  const path = opened.codePath();
  return path ? { ...report, redisCalls: describePath(path) } : report;
}

/** The decision's modes, as the settings choose them (see decision/policy.ts). */
function modeOptions(settings: Settings) {
  const reference = settings.compatMode === 'reference';
  return {
    defaultAlgorithm: settings.defaultAlgorithm,
    keyPrefix: settings.cacheKeyPrefix,
    shadowMode: settings.shadowMode,
    quotaMode: settings.quotaMode,
    ietfHeaders: settings.rateLimitHeaders === 'ietf',
    dynamicMetadata: settings.responseDynamicMetadata,
    referenceHeaders: settings.limitHeaders.enabled ? settings.limitHeaders : undefined,
    nearLimitRatio: settings.metrics.nearLimitRatio,
    referenceCounting: reference ? { stop: settings.stopIncrementWhenOverLimit } : undefined,
    referenceKeys: settings.referenceKeys !== undefined,
    wholeSecondResets: reference,
  };
}
