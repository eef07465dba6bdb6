import { fileURLToPath } from 'node:url';
import type { FunctionsSetting } from '../store/functions.js';
import { join } from 'node:path';
import {
  boolean,
  duration,
  integer,
  oneOf,
  optional,
  ratio,
  text,
  type Env as AnyEnv,
  type NamedEnv,
} from '../core/envValues.js';
import { SettingsError } from '../core/errors.js';
import { redactSecrets, secretsIn } from '../core/redact.js';
import { ALGORITHMS, type Algorithm } from '../rules/types.js';
import type { StatsdSettings } from '../observability/statsd.js';
import type { FailureMode } from '../decision/limiter.js';
import type { GrpcServerSettings } from '../servers/grpc/serverSettings.js';
import type { HttpServerSettings } from '../servers/http/serverSettings.js';
import type { MetricsListenSettings, RlconfigSettings } from '../servers/servers.js';
import type { LogLevel } from '../core/logger.js';
import type { XdsSettings } from '../rules/xdsSettings.js';
import type { RedisNode, RedisSettings, RedisTls } from '../store/redisSettings.js';
import type { RlqsSettings } from '../rlqs/rlqsSettings.js';

/**
 * Every setting, read from the environment in this one place, with its default beside it.
 * Names follow envoyproxy/ratelimit where it has one. A bad value stops start-up with a
 * SettingsError that names the setting.
 */
export interface Settings {
  grpcHost: string;
  grpcPort: number;
  /** Listen on this Unix socket instead of TCP. */
  grpcUds: string | undefined;
  host: string;
  port: number;
  /** A rules file or a directory of them (CONFIG_TYPE=FILE). */
  configPath: string;
  /** CONFIG_TYPE=GRPC_XDS_SOTW: the rules come from an xDS management server instead. */
  xds: XdsSettings | undefined;
  redis: RedisSettings | undefined;
  failureMode: FailureMode;
  clock: 'redis' | 'local';
  /** The most requests decided in one Redis script call; 1 sends each on its own. */
  redisBatchLimit: number;
  /** How long a check may wait for others to share its script call; 0: the loop's turn only. */
  redisBatchWindowMs: number;
  /** Whether decision calls go as Redis functions (FCALL) or scripts (EVALSHA). */
  redisFunctions: FunctionsSetting;
  /** CLOCK=local: how far the clocks of the instances and of Redis may disagree, in ms. */
  clockSkewToleranceMs: number;
  defaultAlgorithm: Algorithm;
  cacheKeyPrefix: string;
  shadowMode: boolean;
  /** Global QUOTA_MODE: every descriptor is a quota descriptor. */
  quotaMode: boolean;
  /** The IETF RateLimit headers on every response (`ietf`), or none. */
  rateLimitHeaders: 'ietf' | 'none';
  maxDescriptors: number;
  maxEntries: number;
  maxEntryBytes: number;
  /** A descriptor's `limit` override is decided (true) or refused as INVALID_ARGUMENT. */
  limitOverrides: boolean;
  workers: number;
  logLevel: LogLevel;
  logFormat: 'json' | 'text';
  /** Allow several rules files to define one domain, merged in file order. */
  mergeDomainConfig: boolean;
  /** How often the rules are polled for changes, besides the file watcher. */
  configPollIntervalMs: number;
  /** How long a changed rules file must hold still before it is loaded; 0: at once. */
  configSettleMs: number;
  /** Return matched rules' `metadata` in `dynamic_metadata`. */
  responseDynamicMetadata: boolean;
  /** The reference's RateLimit-Limit/-Remaining/-Reset headers, when `enabled`. */
  limitHeaders: { enabled: boolean; limit: string; remaining: string; reset: string };
  metrics: {
    /** `near_limit` counts hits that leave a counter at or above this share of its limit. */
    nearLimitRatio: number;
    /** The most descriptor-valued series (detailed_metric, value_to_metric), in total. */
    maxDetailedSeries: number;
  };
  grpcServer: GrpcServerSettings;
  http: HttpServerSettings;
  /** How long SIGTERM waits for calls in flight. */
  shutdownGraceMs: number;
  /** Denied counters remembered until their reset, so repeated denials skip the store; 0: off. */
  overLimitCacheSize: number;
  /** COMPAT_MODE: `reference` answers as envoyproxy/ratelimit does (docs/migration.md). */
  compatMode: 'off' | 'reference';
  /** STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT, read under COMPAT_MODE=reference. */
  stopIncrementWhenOverLimit: boolean;
  /**
   * COMPAT_KEYS=reference (with COMPAT_MODE=reference): the counters are the reference's own
   * keys and counts, shared with it during a cut-over (docs/migration.md); undefined otherwise.
   */
  referenceKeys: ReferenceKeysSettings | undefined;
  /** The reference's statsd output; undefined unless USE_STATSD=true. */
  statsd: StatsdSettings | undefined;
  /** A listener of its own for the metrics (PROMETHEUS_ADDR), besides the HTTP port's /metrics. */
  prometheus: MetricsListenSettings | undefined;
  /** Where GET /rlconfig is served (RLCONFIG, DEBUG_HOST, DEBUG_PORT). */
  rlconfig: RlconfigSettings;
  /** Envoy's Rate Limit Quota Service on the gRPC port; undefined when RLQS_ENABLED=false. */
  rlqs: RlqsSettings | undefined;
}

/** COMPAT_KEYS=reference: how the reference's keys expire. */
export interface ReferenceKeysSettings {
  /** EXPIRATION_JITTER_MAX_SECONDS: each write's TTL is the window plus up to this, at random. */
  jitterMaxSeconds: number;
}

// Each part declares the settings it reads; these are here so that every setting can be found
// from this file.
export type {
  FailureMode,
  GrpcServerSettings,
  HttpServerSettings,
  LogLevel,
  MetricsListenSettings,
  RedisNode,
  RedisSettings,
  RedisTls,
  RlqsSettings,
  XdsSettings,
};

/**
 * Every name this file reads, and no other: the readers take only these names (a read of another
 * does not compile), so this is the one list of tollgate's settings. docs/settings.md documents
 * each; process/settingNames.ts adds the names that other parts and other programs read.
 */
export const SETTING_NAMES = [
  'BACKEND_TYPE',
  'CACHE_KEY_PREFIX',
  'CLOCK',
  'CLOCK_SKEW_TOLERANCE',
  'COMPAT_KEYS',
  'COMPAT_MODE',
  'CONFIG_GRPC_XDS_CLIENT_ADDITIONAL_HEADERS',
  'CONFIG_GRPC_XDS_CLIENT_TLS_CERT',
  'CONFIG_GRPC_XDS_CLIENT_TLS_KEY',
  'CONFIG_GRPC_XDS_NODE_ID',
  'CONFIG_GRPC_XDS_NODE_METADATA',
  'CONFIG_GRPC_XDS_SERVER_CONNECT_RETRY_INTERVAL',
  'CONFIG_GRPC_XDS_SERVER_TLS_CACERT',
  'CONFIG_GRPC_XDS_SERVER_TLS_SAN',
  'CONFIG_GRPC_XDS_SERVER_URL',
  'CONFIG_GRPC_XDS_SERVER_USE_TLS',
  'CONFIG_PATH',
  'CONFIG_POLL_INTERVAL',
  'CONFIG_SETTLE_TIME',
  'CONFIG_TYPE',
  'DEBUG_HOST',
  'DEBUG_PORT',
  'DEFAULT_ALGORITHM',
  'EXPIRATION_JITTER_MAX_SECONDS',
  'EXTRA_TAGS',
  'FAILURE_MODE',
  'FORCE_START_WITHOUT_INITIAL_CONFIG',
  'GRPC_CALL_TIMEOUT',
  'GRPC_CLIENT_TLS_CACERT',
  'GRPC_CLIENT_TLS_SAN',
  'GRPC_FAST_PATH',
  'GRPC_HOST',
  'GRPC_KEEPALIVE_TIME',
  'GRPC_KEEPALIVE_TIMEOUT',
  'GRPC_MAX_CALLS',
  'GRPC_MAX_CONCURRENT_STREAMS',
  'GRPC_MAX_CONNECTIONS',
  'GRPC_MAX_CONNECTION_AGE',
  'GRPC_MAX_CONNECTION_AGE_GRACE',
  'GRPC_MAX_CONNECTION_IDLE',
  'GRPC_MAX_PEER_RESETS',
  'GRPC_MAX_RECEIVING_BYTES',
  'GRPC_PORT',
  'GRPC_SERVER_TLS_CERT',
  'GRPC_SERVER_TLS_KEY',
  'GRPC_SERVER_USE_TLS',
  'GRPC_UDS',
  'HEALTHY_WITH_AT_LEAST_ONE_CONFIG_LOADED',
  'HOST',
  'HTTP_HEADERS_TIMEOUT',
  'HTTP_JSON',
  'HTTP_MAX_CONNECTIONS',
  'HTTP_REQUEST_TIMEOUT',
  'LIMIT_LIMIT_HEADER',
  'LIMIT_OVERRIDES_ENABLED',
  'LIMIT_REMAINING_HEADER',
  'LIMIT_RESET_HEADER',
  'LIMIT_RESPONSE_HEADERS_ENABLED',
  'LOCAL_CACHE_SIZE_IN_BYTES',
  'LOG_FORMAT',
  'LOG_LEVEL',
  'MAX_DESCRIPTORS',
  'MAX_ENTRIES',
  'MAX_ENTRY_BYTES',
  'MERGE_DOMAIN_CONFIG',
  'METRICS_MAX_DETAILED_SERIES',
  'NEAR_LIMIT_RATIO',
  'OVER_LIMIT_CACHE_SIZE',
  'PORT',
  'PROMETHEUS_ADDR',
  'PROMETHEUS_PATH',
  'QUOTA_MODE',
  'RATELIMIT_HEADERS',
  'REDIS_AUTH',
  'REDIS_BATCH_LIMIT',
  'REDIS_BATCH_WINDOW',
  'REDIS_FUNCTIONS',
  'REDIS_PERSECOND',
  'REDIS_SOCKET_TYPE',
  'REDIS_TIMEOUT',
  'REDIS_TLS',
  'REDIS_TLS_CACERT',
  'REDIS_TLS_CLIENT_CERT',
  'REDIS_TLS_CLIENT_KEY',
  'REDIS_TLS_SKIP_HOSTNAME_VERIFICATION',
  'REDIS_TYPE',
  'REDIS_URL',
  'RESPONSE_DYNAMIC_METADATA',
  'RLCONFIG',
  'RLQS_ASSIGNMENT_TTL_FLOOR',
  'RLQS_ENABLED',
  'RLQS_MAX_BUCKET_REPORTS_PER_SECOND',
  'RLQS_MAX_BUCKETS_PER_STREAM',
  'RLQS_MAX_CONSUMERS_PER_POOL',
  'RLQS_MAX_QUEUED_BYTES',
  'RLQS_MAX_QUEUED_BYTES_TOTAL',
  'RLQS_MAX_REPORTS_PER_SECOND',
  'RLQS_MAX_STREAMS',
  'RLQS_STALE_STREAM',
  'RLQS_UNMATCHED_ACTION',
  'RLQS_UNREAD_TIMEOUT',
  'RUNTIME_APPDIRECTORY',
  'RUNTIME_ROOT',
  'RUNTIME_SUBDIRECTORY',
  'SHADOW_MODE',
  'SHUTDOWN_GRACE',
  'STATSD_HOST',
  'STATSD_PORT',
  'STATSD_PROTOCOL',
  'STATS_FLUSH_INTERVAL',
  'STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT',
  'USE_DOG_STATSD',
  'USE_PROMETHEUS',
  'USE_STATSD',
  'WORKERS',
  'XDS_CLIENT_BACKOFF_INITIAL_INTERVAL',
  'XDS_CLIENT_BACKOFF_JITTER',
  'XDS_CLIENT_BACKOFF_MAX_INTERVAL',
  'XDS_CLIENT_BACKOFF_RANDOM_FACTOR',
  'XDS_CLIENT_MAX_MSG_SIZE_IN_BYTES',
  'XDS_REFUSE_EMPTY_UPDATE',
] as const;
export type SettingName = (typeof SETTING_NAMES)[number];
/** The environment as this file sees it: only the names above. */
type Env = NamedEnv<SettingName>;

export const BUNDLED_RULES = fileURLToPath(new URL('../../config/example.yaml', import.meta.url));

export function readSettings(env: AnyEnv = process.env): Settings {
  try {
    return readAll(env);
  } catch (error) {
    // A message quotes the bad setting, which may hold a password: never print it.
    if (error instanceof SettingsError) {
      throw new SettingsError(redactSecrets(error.message, secretsIn(env)), { cause: error });
    }
    throw error;
  }
}

/** Each concern's settings are read by a function of its own; a few defaults follow COMPAT_MODE. */
function readAll(env: Env): Settings {
  const compatMode = oneOf(env, 'COMPAT_MODE', ['off', 'reference'] as const, 'off');
  const reference = compatMode === 'reference';
  const settings: Settings = {
    ...readServers(env),
    ...readRuleSource(env, reference),
    ...readStore(env),
    ...readRequests(env),
    ...readDecisions(env, reference),
    ...readResponses(env, reference),
    ...readProcess(env),
    ...readObservability(env),
    rlqs: readRlqs(env),
    compatMode,
    referenceKeys: undefined,
  };
  if (settings.workers > 1 && !settings.redis) {
    throw new SettingsError('WORKERS: more than 1 needs REDIS_URL, since workers share no memory');
  }
  refuseWhatTollgateLacks(env, settings.redis);
  return readReferenceKeys(env, settings);
}

/**
 * COMPAT_KEYS=reference: the reference's counters, shared with it. They are windows on the
 * instance's clock, the reference's units only, in the one Redis of REDIS_URL; every setting
 * that would count elsewhere or otherwise is refused rather than quietly split the counts.
 */
function readReferenceKeys(env: Env, settings: Settings): Settings {
  const keys = oneOf(env, 'COMPAT_KEYS', ['tollgate', 'reference'] as const, 'tollgate');
  if (keys === 'tollgate') return settings;
  const refuse = (why: string) => {
    throw new SettingsError(`COMPAT_KEYS=reference: ${why}`);
  };
  if (settings.compatMode !== 'reference') refuse('needs COMPAT_MODE=reference');
  if (settings.redis === undefined)
    refuse("needs REDIS_URL: the counters are the reference's, in Redis");
  if (env.CLOCK === 'redis') {
    refuse(
      "needs CLOCK=local (its default here): the reference's windows follow the instance's clock",
    );
  }
  if (settings.defaultAlgorithm !== 'fixed_window') {
    refuse(`counts fixed windows only, not DEFAULT_ALGORITHM=${settings.defaultAlgorithm}`);
  }
  if (boolean(env, 'REDIS_PERSECOND', false)) {
    refuse("per-second limits would count in REDIS_URL's Redis, not REDIS_PERSECOND_URL's");
  }
  if (settings.rlqs !== undefined && env.RLQS_ENABLED !== undefined) {
    refuse("RLQS charges tollgate's own counters: set RLQS_ENABLED=false, or leave it unset");
  }
  return {
    ...settings,
    clock: 'local',
    // The reference serves no quota streams: off unless asked for, and asking is refused above.
    rlqs: undefined,
    referenceKeys: {
      jitterMaxSeconds: integer(env, 'EXPIRATION_JITTER_MAX_SECONDS', 300, 0, 86_400),
    },
  };
}

/**
 * envoyproxy/ratelimit's settings that ask for what tollgate has not are refused, naming what
 * works; docs/settings.md says which only draw a warning, and why.
 */
function refuseWhatTollgateLacks(env: Env, redis: RedisSettings | undefined): void {
  const backend = text(env, 'BACKEND_TYPE', '');
  if (backend !== '' && backend.toLowerCase() !== 'redis') {
    throw new SettingsError(
      `BACKEND_TYPE: '${backend}' is not a store tollgate has: counters are in Redis ` +
        '(REDIS_URL, with BACKEND_TYPE=redis or unset) or, with neither set, in this process',
    );
  }
  if (backend !== '' && redis === undefined) {
    throw new SettingsError(
      'BACKEND_TYPE: redis needs REDIS_URL: without it the counters would be in this process ' +
        'only; set REDIS_URL, or unset BACKEND_TYPE for the in-memory store',
    );
  }
  if (boolean(env, 'USE_DOG_STATSD', false)) {
    throw new SettingsError(
      'USE_DOG_STATSD: tollgate sends no DogStatsD: unset it, and scrape GET /metrics ' +
        '(or PROMETHEUS_ADDR), or send plain statsd with USE_STATSD=true',
    );
  }
}

/** Where tollgate listens, and the bounds of its gRPC and HTTP servers. */
function readServers(
  env: Env,
): Pick<
  Settings,
  'grpcHost' | 'grpcPort' | 'grpcUds' | 'host' | 'port' | 'grpcServer' | 'http' | 'rlconfig'
> {
  return {
    grpcHost: text(env, 'GRPC_HOST', '0.0.0.0'),
    grpcPort: integer(env, 'GRPC_PORT', 8081, 0, 65_535),
    grpcUds: env.GRPC_UDS || undefined,
    host: text(env, 'HOST', '0.0.0.0'),
    port: integer(env, 'PORT', 8080, 0, 65_535),
    grpcServer: readGrpcServer(env, duration(env, 'REDIS_TIMEOUT', '15ms')),
    http: readHttpServer(env),
    rlconfig: readRlconfig(env),
  };
}

/**
 * RLCONFIG: `on` serves /rlconfig on the HTTP port, `debug` on a listener of its own at
 * DEBUG_HOST:DEBUG_PORT (the reference's debug port, 0.0.0.0:6070), `off` nowhere. Setting
 * DEBUG_HOST or DEBUG_PORT alone means `debug`, as it does for the reference.
 */
function readRlconfig(env: Env): RlconfigSettings {
  const debugSet =
    optional(env, 'DEBUG_HOST') !== undefined || optional(env, 'DEBUG_PORT') !== undefined;
  const on = oneOf(env, 'RLCONFIG', ['on', 'off', 'debug'] as const, debugSet ? 'debug' : 'on');
  if (on === 'on') return { on: 'http' };
  if (on === 'off') return { on: 'off' };
  return {
    on: 'debug',
    host: text(env, 'DEBUG_HOST', '0.0.0.0'),
    port: integer(env, 'DEBUG_PORT', 6070, 0, 65_535),
  };
}

/** Where the rules come from (a file, a directory or xDS), how they load and how they reload. */
function readRuleSource(
  env: Env,
  reference: boolean,
): Pick<
  Settings,
  | 'configPath'
  | 'xds'
  | 'defaultAlgorithm'
  | 'mergeDomainConfig'
  | 'configPollIntervalMs'
  | 'configSettleMs'
> {
  return {
    configPath: readConfigPath(env),
    xds: readXds(env),
    defaultAlgorithm: oneOf(
      env,
      'DEFAULT_ALGORITHM',
      ALGORITHMS,
      reference ? 'fixed_window' : 'sliding_window',
    ),
    mergeDomainConfig: boolean(env, 'MERGE_DOMAIN_CONFIG', false),
    configPollIntervalMs: duration(env, 'CONFIG_POLL_INTERVAL', '10s', 100),
    configSettleMs: duration(env, 'CONFIG_SETTLE_TIME', '1s', 0),
  };
}

/** CONFIG_PATH, else the reference's RUNTIME_ROOT layout, else the bundled example. */
function readConfigPath(env: Env): string {
  if (env.CONFIG_PATH) return env.CONFIG_PATH;
  if (!env.RUNTIME_ROOT) return BUNDLED_RULES;
  return join(
    env.RUNTIME_ROOT,
    text(env, 'RUNTIME_SUBDIRECTORY', ''),
    text(env, 'RUNTIME_APPDIRECTORY', 'config'),
  );
}

/** The counters' store, its keys, its clock, and what a check answers when it fails. */
function readStore(
  env: Env,
): Pick<
  Settings,
  | 'redis'
  | 'failureMode'
  | 'clock'
  | 'clockSkewToleranceMs'
  | 'redisBatchLimit'
  | 'redisBatchWindowMs'
  | 'redisFunctions'
  | 'cacheKeyPrefix'
> {
  const store = {
    redis: readRedis(env),
    failureMode: oneOf(env, 'FAILURE_MODE', ['error', 'deny', 'allow'] as const, 'error'),
    clock: oneOf(env, 'CLOCK', ['redis', 'local'] as const, 'redis'),
    clockSkewToleranceMs: duration(env, 'CLOCK_SKEW_TOLERANCE', '5s', 0),
    redisBatchLimit: integer(env, 'REDIS_BATCH_LIMIT', 16, 1, 1_000),
    redisBatchWindowMs: duration(env, 'REDIS_BATCH_WINDOW', '0s', 0),
    redisFunctions: oneOf(env, 'REDIS_FUNCTIONS', ['auto', 'on', 'off'] as const, 'auto'),
    cacheKeyPrefix: text(env, 'CACHE_KEY_PREFIX', ''),
  };
  if (/[{}]/.test(store.cacheKeyPrefix)) {
    throw new SettingsError(
      'CACHE_KEY_PREFIX: may not contain { or }, which Redis reads as a hash tag',
    );
  }
  return store;
}

/** How large a request may be, and whether it may override a limit. */
function readRequests(
  env: Env,
): Pick<Settings, 'maxDescriptors' | 'maxEntries' | 'maxEntryBytes' | 'limitOverrides'> {
  return {
    maxDescriptors: integer(env, 'MAX_DESCRIPTORS', 64, 1, 100_000),
    maxEntries: integer(env, 'MAX_ENTRIES', 16, 1, 10_000),
    maxEntryBytes: integer(env, 'MAX_ENTRY_BYTES', 1024, 1, 1 << 24),
    limitOverrides: boolean(env, 'LIMIT_OVERRIDES_ENABLED', true),
  };
}

/** How a decision is made: enforced or only counted, and what an over-limit counter skips. */
function readDecisions(
  env: Env,
  reference: boolean,
): Pick<
  Settings,
  'shadowMode' | 'quotaMode' | 'overLimitCacheSize' | 'stopIncrementWhenOverLimit'
> {
  // The reference remembers over-limit keys only when LOCAL_CACHE_SIZE_IN_BYTES asks it to.
  const localCache =
    reference && integer(env, 'LOCAL_CACHE_SIZE_IN_BYTES', 0, 0, Number.MAX_SAFE_INTEGER) > 0;
  return {
    shadowMode: boolean(env, 'SHADOW_MODE', false),
    quotaMode: boolean(env, 'QUOTA_MODE', false),
    overLimitCacheSize: integer(
      env,
      'OVER_LIMIT_CACHE_SIZE',
      reference && !localCache ? 0 : 10_000,
      0,
      10_000_000,
    ),
    stopIncrementWhenOverLimit: boolean(env, 'STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT', false),
  };
}

/** What an answer carries besides its codes: headers and the rules' metadata. */
function readResponses(
  env: Env,
  reference: boolean,
): Pick<Settings, 'rateLimitHeaders' | 'responseDynamicMetadata' | 'limitHeaders'> {
  return {
    rateLimitHeaders: oneOf(
      env,
      'RATELIMIT_HEADERS',
      ['ietf', 'none'] as const,
      reference ? 'none' : 'ietf',
    ),
    responseDynamicMetadata: boolean(env, 'RESPONSE_DYNAMIC_METADATA', false),
    limitHeaders: {
      enabled: boolean(env, 'LIMIT_RESPONSE_HEADERS_ENABLED', false),
      limit: text(env, 'LIMIT_LIMIT_HEADER', 'RateLimit-Limit'),
      remaining: text(env, 'LIMIT_REMAINING_HEADER', 'RateLimit-Remaining'),
      reset: text(env, 'LIMIT_RESET_HEADER', 'RateLimit-Reset'),
    },
  };
}

/** Envoy's Rate Limit Quota Service: on unless RLQS_ENABLED=false (see docs/rlqs.md). */
function readRlqs(env: Env): RlqsSettings | undefined {
  if (!boolean(env, 'RLQS_ENABLED', true)) return undefined;
  const maxQueuedBytes = integer(env, 'RLQS_MAX_QUEUED_BYTES', 16 * 1024 * 1024, 1, 2 ** 40);
  const maxQueuedBytesTotal = integer(
    env,
    'RLQS_MAX_QUEUED_BYTES_TOTAL',
    64 * 1024 * 1024,
    1,
    2 ** 40,
  );
  if (maxQueuedBytesTotal < maxQueuedBytes) {
    throw new SettingsError(
      `RLQS_MAX_QUEUED_BYTES_TOTAL: ${maxQueuedBytesTotal} is less than RLQS_MAX_QUEUED_BYTES (${maxQueuedBytes}), which one stream may queue`,
    );
  }
  const maxBucketsPerStream = integer(env, 'RLQS_MAX_BUCKETS_PER_STREAM', 1_000, 1, 1_000_000);
  const maxBucketReportsPerSecond = integer(
    env,
    'RLQS_MAX_BUCKET_REPORTS_PER_SECOND',
    1_000,
    1,
    10_000_000,
  );
  if (5 * maxBucketReportsPerSecond < maxBucketsPerStream) {
    throw new SettingsError(
      `RLQS_MAX_BUCKET_REPORTS_PER_SECOND: ${maxBucketReportsPerSecond} a second (a burst of ${5 * maxBucketReportsPerSecond}) cannot take one report of RLQS_MAX_BUCKETS_PER_STREAM (${maxBucketsPerStream}) buckets`,
    );
  }
  return {
    unmatched: oneOf(env, 'RLQS_UNMATCHED_ACTION', ['allow', 'deny'] as const, 'allow'),
    maxStreams: integer(env, 'RLQS_MAX_STREAMS', 10_000, 1, 1_000_000),
    maxBucketsPerStream,
    maxReportsPerSecond: integer(env, 'RLQS_MAX_REPORTS_PER_SECOND', 20, 1, 10_000),
    maxBucketReportsPerSecond,
    staleMs: duration(env, 'RLQS_STALE_STREAM', '10m', 1_000),
    maxQueuedBytes,
    maxQueuedBytesTotal,
    unreadMs: duration(env, 'RLQS_UNREAD_TIMEOUT', '30s', 1_000),
    ttlFloorMs: duration(env, 'RLQS_ASSIGNMENT_TTL_FLOOR', '2s', 1_000),
    maxConsumersPerPool: integer(env, 'RLQS_MAX_CONSUMERS_PER_POOL', 1_000, 1, 100_000),
  };
}

/** How many processes serve, and how long one drains. */
function readProcess(env: Env): Pick<Settings, 'workers' | 'shutdownGraceMs'> {
  return {
    workers: integer(env, 'WORKERS', 1, 1, 1024),
    shutdownGraceMs: duration(env, 'SHUTDOWN_GRACE', '10s', 0),
  };
}

/** Logs, Prometheus metrics and statsd. */
function readObservability(
  env: Env,
): Pick<Settings, 'logLevel' | 'logFormat' | 'metrics' | 'statsd' | 'prometheus'> {
  return {
    logLevel: oneOf(
      env,
      'LOG_LEVEL',
      ['trace', 'debug', 'info', 'warn', 'error', 'fatal', 'silent'] as const,
      'info',
    ),
    logFormat: oneOf(env, 'LOG_FORMAT', ['json', 'text'] as const, 'json'),
    metrics: {
      nearLimitRatio: ratio(env, 'NEAR_LIMIT_RATIO', 0.8),
      maxDetailedSeries: integer(env, 'METRICS_MAX_DETAILED_SERIES', 1000, 0, 1_000_000),
    },
    statsd: readStatsd(env),
    prometheus: readPrometheus(env),
  };
}

/**
 * The reference's metrics listener: USE_PROMETHEUS=true serves the metrics on PROMETHEUS_ADDR
 * (`:9090` by default) at PROMETHEUS_PATH. PROMETHEUS_ADDR alone turns it on too, since that is
 * what a scrape configuration points at; USE_PROMETHEUS=false turns it off.
 */
function readPrometheus(env: Env): MetricsListenSettings | undefined {
  const addr = optional(env, 'PROMETHEUS_ADDR');
  if (!boolean(env, 'USE_PROMETHEUS', addr !== undefined)) return undefined;
  const path = text(env, 'PROMETHEUS_PATH', '/metrics');
  if (!path.startsWith('/') || /[\s?#]/.test(path)) {
    throw new SettingsError(
      `PROMETHEUS_PATH: '${path}' is not a path such as /metrics (it starts with /, and holds no space, ? or #)`,
    );
  }
  return { ...hostAndPort('PROMETHEUS_ADDR', addr ?? ':9090'), path };
}

/** `host:port`, `:port` (every interface), or `[v6]:port`, as Go's listeners take them. */
function hostAndPort(name: string, value: string): { host: string | undefined; port: number } {
  const match = /^(\[[0-9a-fA-F:.]+\]|[^:[\]\s]*):(\d{1,5})$/.exec(value.trim());
  const port = Number(match?.[2]);
  if (match === null || port > 65_535) {
    throw new SettingsError(
      `${name}: '${value}' is not host:port or :port (for example :9090 or 127.0.0.1:9090)`,
    );
  }
  const host = (match[1] ?? '').replace(/^\[(.*)\]$/, '$1');
  return { host: host === '' ? undefined : host, port };
}

/** `k1=v1,k2=v2` (or `k1:v1,...`, as the reference's map settings are written). */
function pairs(env: Env, name: SettingName): Record<string, string> {
  const out: Record<string, string> = {};
  const value = env[name];
  if (!value) return out;
  for (const item of value.split(',')) {
    if (item.trim() === '') continue;
    const at = item.search(/[=:]/);
    if (at <= 0) throw new SettingsError(`${name}: '${item}' is not key=value`);
    Object.defineProperty(out, item.slice(0, at).trim(), {
      value: item.slice(at + 1).trim(),
      enumerable: true,
    });
  }
  return out;
}

function readXds(env: Env): XdsSettings | undefined {
  const type = oneOf(env, 'CONFIG_TYPE', ['file', 'grpc_xds_sotw'] as const, 'file');
  if (type === 'file') return undefined;
  const forceStart = boolean(env, 'FORCE_START_WITHOUT_INITIAL_CONFIG', false);
  const maxMessageBytes = optional(env, 'XDS_CLIENT_MAX_MSG_SIZE_IN_BYTES');
  const initialMs = duration(env, 'XDS_CLIENT_BACKOFF_INITIAL_INTERVAL', '10s');
  const maxMs = duration(env, 'XDS_CLIENT_BACKOFF_MAX_INTERVAL', '60s');
  if (maxMs < initialMs) {
    throw new SettingsError(
      `XDS_CLIENT_BACKOFF_MAX_INTERVAL: ${maxMs}ms is shorter than XDS_CLIENT_BACKOFF_INITIAL_INTERVAL (${initialMs}ms)`,
    );
  }
  return {
    serverUrl: text(env, 'CONFIG_GRPC_XDS_SERVER_URL', 'localhost:18000'),
    nodeId: text(env, 'CONFIG_GRPC_XDS_NODE_ID', 'default'),
    nodeMetadata: pairs(env, 'CONFIG_GRPC_XDS_NODE_METADATA'),
    connectRetryIntervalMs: duration(env, 'CONFIG_GRPC_XDS_SERVER_CONNECT_RETRY_INTERVAL', '3s'),
    additionalHeaders: pairs(env, 'CONFIG_GRPC_XDS_CLIENT_ADDITIONAL_HEADERS'),
    tls: boolean(env, 'CONFIG_GRPC_XDS_SERVER_USE_TLS', false)
      ? {
          certPath: optional(env, 'CONFIG_GRPC_XDS_CLIENT_TLS_CERT'),
          keyPath: optional(env, 'CONFIG_GRPC_XDS_CLIENT_TLS_KEY'),
          caPath: optional(env, 'CONFIG_GRPC_XDS_SERVER_TLS_CACERT'),
          san: optional(env, 'CONFIG_GRPC_XDS_SERVER_TLS_SAN'),
        }
      : undefined,
    backoff: {
      initialMs,
      maxMs,
      randomFactor: ratio(env, 'XDS_CLIENT_BACKOFF_RANDOM_FACTOR', 0.5),
      jitter: boolean(env, 'XDS_CLIENT_BACKOFF_JITTER', true),
    },
    // 0, as unset, is gRPC's default (4 MiB), as the reference reads it.
    maxMessageBytes:
      maxMessageBytes === undefined
        ? undefined
        : integer(env, 'XDS_CLIENT_MAX_MSG_SIZE_IN_BYTES', 0, 0, 2 ** 31 - 1) || undefined,
    forceStart,
    healthyWithConfigOnly: boolean(env, 'HEALTHY_WITH_AT_LEAST_ONE_CONFIG_LOADED', false),
    refuseEmptyUpdate: boolean(env, 'XDS_REFUSE_EMPTY_UPDATE', false),
  };
}

function readGrpcServer(env: Env, redisTimeoutMs: number): GrpcServerSettings {
  const useTls = boolean(env, 'GRPC_SERVER_USE_TLS', false);
  const certPath = optional(env, 'GRPC_SERVER_TLS_CERT');
  const keyPath = optional(env, 'GRPC_SERVER_TLS_KEY');
  if (useTls && (!certPath || !keyPath)) {
    throw new SettingsError(
      'GRPC_SERVER_USE_TLS: true needs GRPC_SERVER_TLS_CERT and GRPC_SERVER_TLS_KEY',
    );
  }
  return {
    maxConnectionAgeMs: duration(env, 'GRPC_MAX_CONNECTION_AGE', '24h'),
    maxConnectionAgeGraceMs: duration(env, 'GRPC_MAX_CONNECTION_AGE_GRACE', '1h'),
    maxConnectionIdleMs: duration(env, 'GRPC_MAX_CONNECTION_IDLE', '5m'),
    maxConcurrentStreams: integer(env, 'GRPC_MAX_CONCURRENT_STREAMS', 100, 0, 2 ** 31 - 1),
    maxConnections: integer(env, 'GRPC_MAX_CONNECTIONS', 10_000, 1, 1_000_000),
    maxCalls: integer(env, 'GRPC_MAX_CALLS', 5_000, 1, 1_000_000),
    maxReceivingBytes: integer(env, 'GRPC_MAX_RECEIVING_BYTES', 64 * 1024 * 1024, 1, 2 ** 40),
    callTimeoutMs: callTimeout(env, redisTimeoutMs),
    maxPeerResets: integer(env, 'GRPC_MAX_PEER_RESETS', 1_000, 0, 1_000_000_000),
    keepaliveTimeMs: duration(env, 'GRPC_KEEPALIVE_TIME', '2h'),
    keepaliveTimeoutMs: duration(env, 'GRPC_KEEPALIVE_TIMEOUT', '20s'),
    fastPath: boolean(env, 'GRPC_FAST_PATH', true),
    tls:
      useTls && certPath && keyPath
        ? {
            certPath,
            keyPath,
            clientCaPath: optional(env, 'GRPC_CLIENT_TLS_CACERT'),
            clientSan: optional(env, 'GRPC_CLIENT_TLS_SAN'),
          }
        : undefined,
  };
}

/**
 * GRPC_CALL_TIMEOUT bounds a call's whole life, its decision included, so it must outlast
 * REDIS_TIMEOUT: by default 10 s, or twice REDIS_TIMEOUT when that is longer.
 */
function callTimeout(env: Env, redisTimeoutMs: number): number {
  const fallback = Math.max(10_000, 2 * redisTimeoutMs);
  const given = duration(env, 'GRPC_CALL_TIMEOUT', `${fallback}ms`, 1);
  if (given <= redisTimeoutMs) {
    throw new SettingsError(
      `GRPC_CALL_TIMEOUT: '${env.GRPC_CALL_TIMEOUT}' must be longer than REDIS_TIMEOUT (${redisTimeoutMs}ms), which a call may spend in Redis`,
    );
  }
  return given;
}

function readHttpServer(env: Env): HttpServerSettings {
  const http = {
    maxConnections: integer(env, 'HTTP_MAX_CONNECTIONS', 1_000, 1, 1_000_000),
    headersTimeoutMs: duration(env, 'HTTP_HEADERS_TIMEOUT', '10s', 1),
    requestTimeoutMs: duration(env, 'HTTP_REQUEST_TIMEOUT', '30s', 1),
    json: oneOf(env, 'HTTP_JSON', ['auto', 'on', 'off'] as const, 'auto'),
  };
  if (http.headersTimeoutMs > http.requestTimeoutMs) {
    throw new SettingsError(
      `HTTP_HEADERS_TIMEOUT: ${http.headersTimeoutMs}ms is longer than HTTP_REQUEST_TIMEOUT (${http.requestTimeoutMs}ms), which includes the headers`,
    );
  }
  return http;
}

/** The Redis settings are validated even without REDIS_URL, so a typo never waits for later. */
function readRedis(env: Env): RedisSettings | undefined {
  const type = oneOf(env, 'REDIS_TYPE', ['single', 'sentinel', 'cluster'] as const, 'single');
  const timeoutMs = duration(env, 'REDIS_TIMEOUT', '15ms');
  const tlsDefault = boolean(env, 'REDIS_TLS', false);
  const tls: RedisTls = {
    caPath: optional(env, 'REDIS_TLS_CACERT'),
    clientCertPath: optional(env, 'REDIS_TLS_CLIENT_CERT'),
    clientKeyPath: optional(env, 'REDIS_TLS_CLIENT_KEY'),
    skipHostnameVerification: boolean(env, 'REDIS_TLS_SKIP_HOSTNAME_VERIFICATION', false),
  };
  const socketType = oneOf(env, 'REDIS_SOCKET_TYPE', ['tcp', 'unix'] as const, 'tcp');
  const url = env.REDIS_URL;
  if (!url) return undefined;
  if (type !== 'single' && (socketType === 'unix' || /^unix:/i.test(url))) {
    throw new SettingsError(`REDIS_URL: a Unix socket needs REDIS_TYPE=single ('${url}')`);
  }
  const [authUser, authPassword] = splitAuth(env.REDIS_AUTH);
  const common = (given: Credentials) => ({
    username: given.username ?? authUser,
    password: given.password ?? authPassword,
    tls: given.tls || tlsDefault ? tls : undefined,
    timeoutMs,
  });

  if (type === 'sentinel') {
    const { masterName, sentinels, credentials } = parseSentinelUrl(url);
    const first = sentinels[0] as RedisNode;
    return { type, ...first, nodes: sentinels, masterName, db: 0, ...common(credentials) };
  }
  if (type === 'cluster') {
    const nodes = url.split(',').map((element) => parseNodeUrl(element.trim(), url, 'cluster'));
    const first = nodes[0] as ParsedNode;
    for (const node of nodes) {
      if (node.db !== 0) {
        throw new SettingsError(
          `REDIS_URL: Redis Cluster has only database 0, not ${node.db} ('${url}')`,
        );
      }
      if (node.tls !== first.tls) {
        throw new SettingsError(`REDIS_URL: mixes redis:// and rediss:// nodes ('${url}')`);
      }
      if (
        (node.username ?? first.username) !== first.username ||
        (node.password ?? first.password) !== first.password
      ) {
        throw new SettingsError('REDIS_URL: the nodes give different credentials');
      }
    }
    const credentials = nodes.find((node) => node.password !== undefined) ?? first;
    return {
      type,
      host: first.host,
      port: first.port,
      nodes: nodes.map(({ host, port }) => ({ host, port })),
      db: 0,
      ...common({ ...credentials, tls: first.tls }),
    };
  }
  if (url.includes(',')) {
    throw new SettingsError(`REDIS_URL: a list of nodes needs REDIS_TYPE=cluster ('${url}')`);
  }
  if (socketType === 'unix' || /^unix:/i.test(url)) {
    const { path, db } = parseUnixUrl(url);
    const credentials = { username: undefined, password: undefined, tls: false };
    return { type, host: 'localhost', port: 0, path, db, ...common(credentials) };
  }
  const node = parseNodeUrl(url, url, 'single');
  return { type, host: node.host, port: node.port, db: node.db, ...common(node) };
}

/** What a URL says of credentials and TLS; REDIS_AUTH and REDIS_TLS fill in the rest. */
interface Credentials {
  username: string | undefined;
  password: string | undefined;
  tls: boolean;
}

interface ParsedNode extends Credentials {
  host: string;
  port: number;
  db: number;
}

/** One node: `redis://[user:pass@]host:port[/db]`, `rediss://` for TLS, or a bare `host:port`. */
function parseNodeUrl(text: string, url: string, type: 'single' | 'cluster'): ParsedNode {
  const form =
    type === 'cluster'
      ? 'a comma-separated list of redis://[user:pass@]host:port or host:port'
      : 'redis://[user:pass@]host:port[/db] or host:port';
  if (/^[a-z]+\+sentinel:\/\//i.test(text)) {
    throw new SettingsError(`REDIS_URL: a sentinel URL needs REDIS_TYPE=sentinel ('${url}')`);
  }
  const withScheme = /^[a-z+]+:\/\//i.test(text) ? text : `redis://${text}`;
  let parsed: URL;
  try {
    parsed = new URL(withScheme);
  } catch {
    throw new SettingsError(`REDIS_URL: '${url}' is not ${form}`);
  }
  if (parsed.protocol !== 'redis:' && parsed.protocol !== 'rediss:') {
    throw new SettingsError(`REDIS_URL: scheme '${parsed.protocol}' is not redis: or rediss:`);
  }
  if (parsed.hostname === '') throw new SettingsError(`REDIS_URL: '${url}' is not ${form}`);
  const db = parsed.pathname.replace(/^\//, '');
  if (db !== '' && !/^\d+$/.test(db)) {
    throw new SettingsError(`REDIS_URL: database '${db}' is not a number`);
  }
  return {
    host: parsed.hostname.replace(/^\[|\]$/g, ''),
    port: parsed.port === '' ? 6379 : Number(parsed.port),
    db: db === '' ? 0 : Number(db),
    username: decodeURIComponent(parsed.username) || undefined,
    password: decodeURIComponent(parsed.password) || undefined,
    tls: parsed.protocol === 'rediss:',
  };
}

/**
 * A Unix socket: `unix:///run/redis.sock`, `unix:/run/redis.sock`, optionally with `?db=N`, or
 * (the reference's form, with REDIS_SOCKET_TYPE=unix) the bare path.
 */
function parseUnixUrl(url: string): { path: string; db: number } {
  // unix:///path (an empty authority) or unix:/path; never unix://host/...
  const match = /^(?:unix:\/\/(?=\/)|unix:(?=\/[^/])|(?=\/))(\/[^?]*)(?:\?db=(\d+))?$/i.exec(url);
  if (!match) {
    throw new SettingsError(
      `REDIS_URL: '${url}' is not a Unix socket such as unix:///run/redis.sock[?db=N]`,
    );
  }
  return { path: decodeURIComponent(match[1] as string), db: Number(match[2] ?? 0) };
}

/**
 * `redis+sentinel://[user:pass@]h1:p1,h2:p2/MASTER_NAME` (`rediss+sentinel://` for TLS), or the
 * reference's `MASTER_NAME,h1:p1,h2:p2`. The credentials are the master's; sentinels listen on
 * 26379 unless a port is given.
 */
function parseSentinelUrl(url: string): {
  masterName: string;
  sentinels: RedisNode[];
  credentials: Credentials;
} {
  const form =
    'redis+sentinel://[user:pass@]host:port,host:port/MASTER_NAME or MASTER_NAME,host:port,host:port';
  const scheme = /^([a-z+]+):\/\//i.exec(url)?.[1]?.toLowerCase();
  let masterName: string;
  let hosts: string[];
  let credentials: Credentials = {
    username: undefined,
    password: undefined,
    tls: scheme === 'rediss+sentinel',
  };
  if (scheme === undefined) {
    [masterName = '', ...hosts] = url.split(',').map((part) => part.trim());
    if (/^[^/]*:\d+$/.test(masterName)) {
      throw new SettingsError(
        `REDIS_URL: '${url}' starts with '${masterName}', not the master's name (${form})`,
      );
    }
  } else if (scheme === 'redis+sentinel' || scheme === 'rediss+sentinel') {
    const rest = url.slice(scheme.length + 3);
    const slash = rest.indexOf('/');
    if (slash < 0) throw new SettingsError(`REDIS_URL: '${url}' names no master (${form})`);
    let authority = rest.slice(0, slash);
    masterName = decodeURIComponent(rest.slice(slash + 1));
    const at = authority.lastIndexOf('@');
    if (at >= 0) {
      const [user, password] = splitAuth(authority.slice(0, at));
      credentials = {
        ...credentials,
        username: user ? decodeURIComponent(user) : undefined,
        password: password ? decodeURIComponent(password) : undefined,
      };
      authority = authority.slice(at + 1);
    }
    hosts = authority.split(',').map((part) => part.trim());
  } else {
    throw new SettingsError(`REDIS_URL: scheme '${scheme}:' is not redis+sentinel: (${form})`);
  }
  if (masterName === '' || masterName.includes('/')) {
    throw new SettingsError(`REDIS_URL: '${url}' names no master (${form})`);
  }
  if (hosts.length === 0) throw new SettingsError(`REDIS_URL: '${url}' has no sentinel (${form})`);
  const sentinels = hosts.map((host) => {
    let parsed: URL | undefined;
    try {
      parsed = new URL(`redis://${host}`);
    } catch {
      parsed = undefined;
    }
    if (
      parsed === undefined ||
      parsed.hostname === '' ||
      !/^(\[[^\]]*\]|[^:/@]+)(:\d+)?$/.test(host)
    ) {
      throw new SettingsError(`REDIS_URL: sentinel '${host}' is not host:port (${form})`);
    }
    return {
      host: parsed.hostname.replace(/^\[|\]$/g, ''),
      port: parsed.port === '' ? 26379 : Number(parsed.port),
    };
  });
  return { masterName, sentinels, credentials };
}

/** REDIS_AUTH is `password` or `user:password`, as in the reference. */
function splitAuth(auth: string | undefined): [string | undefined, string | undefined] {
  if (!auth) return [undefined, undefined];
  const colon = auth.indexOf(':');
  return colon < 0 ? [undefined, auth] : [auth.slice(0, colon), auth.slice(colon + 1)];
}

/**
 * USE_STATSD and its settings, with the reference's defaults but one: the reference sends statsd
 * unless told not to, tollgate only when USE_STATSD=true.
 */
function readStatsd(env: Env): StatsdSettings | undefined {
  // Read only when on: a Service named statsd injects STATSD_PORT=tcp://..., no port number.
  if (!boolean(env, 'USE_STATSD', false)) return undefined;
  return {
    host: text(env, 'STATSD_HOST', 'localhost'),
    port: integer(env, 'STATSD_PORT', 8125, 1, 65_535),
    protocol: oneOf(env, 'STATSD_PROTOCOL', ['tcp', 'udp'] as const, 'tcp'),
    flushIntervalMs: duration(env, 'STATS_FLUSH_INTERVAL', '10s', 1),
    extraTags: extraTags(env.EXTRA_TAGS ?? ''),
  };
}

/** EXTRA_TAGS as the reference reads it: `key:value` pairs separated by commas. */
function extraTags(value: string): Record<string, string> {
  const tags: Record<string, string> = {};
  if (value.trim() === '') return tags;
  for (const pair of value.split(',')) {
    const at = pair.indexOf(':');
    if (at <= 0) {
      throw new SettingsError(
        `EXTRA_TAGS: '${pair}' is not key:value (the form is key1:value1,key2:value2)`,
      );
    }
    Object.defineProperty(tags, pair.slice(0, at).trim(), {
      value: pair.slice(at + 1).trim(),
      enumerable: true,
    });
  }
  return tags;
}
