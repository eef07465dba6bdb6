/**
 * What an operator should read at start-up: one line naming what runs (the store, the rules, the
 * failure mode), and a warning for each setting that is set but that tollgate does not honour
 * (a reference setting, one of another mode, or a name that is no setting at all), so that a
 * migration that forgot REDIS_URL, or a typo, shows at once. No credential is ever named.
 */
import { booleanWord, type Env } from '../core/envValues.js';
import { checkNodeLine } from '../core/nodeLines.js';
import type { RuleSet } from '../rules/types.js';
import { rulesInFileOrder } from '../rules/parseRules.js';
import type { ListeningPorts } from '../servers/servers.js';
import { isServiceLink, lookalikeWarnings } from './settingNames.js';
import type { Settings } from './settings.js';

/** Where counters live, for the log: the hosts, never the credentials. */
export function describeStore(settings: Settings): string {
  const redis = settings.redis;
  if (redis === undefined) return 'memory (this process only)';
  const scheme = redis.tls ? 'rediss' : 'redis';
  const nodes = (redis.nodes ?? [redis]).map(({ host, port }) => `${host}:${port}`).join(',');
  if (redis.type === 'cluster') return `redis cluster ${scheme}://${nodes}`;
  if (redis.type === 'sentinel')
    return `redis sentinel ${redis.masterName} via ${scheme}://${nodes}`;
  if (redis.path !== undefined)
    return `redis unix://${redis.path}${redis.db ? `?db=${redis.db}` : ''}`;
  return `redis ${scheme}://${redis.host}:${redis.port}${redis.db ? `/${redis.db}` : ''}`;
}

export function countRules(rules: RuleSet): { domains: number; rules: number } {
  let count = 0;
  for (const domain of rules.domains.values()) count += rulesInFileOrder(domain.root).length;
  return { domains: rules.domains.size, rules: count };
}

/** Whether tracing is on, as observability/tracing.ts decides it: an endpoint, and not disabled. */
function tracingOn(env: Env): boolean {
  const endpoint = env.OTEL_EXPORTER_OTLP_TRACES_ENDPOINT || env.OTEL_EXPORTER_OTLP_ENDPOINT;
  return Boolean(endpoint) && booleanWord(env.OTEL_SDK_DISABLED ?? '') !== true;
}

type Harmless = (value: string, settings: Settings, env: Env) => boolean;
const isFalse: Harmless = (value) => booleanWord(value) === false;

/**
 * envoyproxy/ratelimit's settings that tollgate does not honour but that change no answer, with
 * what an operator should know when one is set: each draws a warning, unless its value asks for
 * what tollgate does anyway. Those that ask for what tollgate has not are refused by settings.ts
 * (BACKEND_TYPE, USE_DOG_STATSD); docs/settings.md has both lists.
 */
const REFERENCE_ONLY: readonly [RegExp, string, Harmless?][] = [
  [/^MEMCACHE_/, 'read only with BACKEND_TYPE=memcache, and tollgate has no memcached store'],
  [
    /^LOCAL_CACHE_SIZE_IN_BYTES$/,
    'the over-limit cache is OVER_LIMIT_CACHE_SIZE, in entries (under COMPAT_MODE=reference, a size above 0 turns it on)',
    (value, settings) => value === '0' || settings.compatMode === 'reference',
  ],
  [/^REDIS_PERSECOND$/, 'per-second limits share the one Redis of REDIS_URL', isFalse],
  [/^REDIS_PERSECOND_/, 'per-second limits share the one Redis of REDIS_URL'],
  [
    /^REDIS_(POOL_SIZE|POOL_ON_EMPTY_BEHAVIOR|PIPELINE_WINDOW|PIPELINE_LIMIT|CLUSTER_PIPELINE_PARALLELISM)$/,
    'tollgate uses one connection and batches calls itself (REDIS_BATCH_LIMIT)',
  ],
  [/^REDIS_(SENTINEL_AUTH|HEALTH_CHECK_ACTIVE_CONNECTION|STARTUP_.*)$/, 'not used by tollgate'],
  [
    /^EXPIRATION_JITTER_MAX_SECONDS$/,
    'counters expire exactly when they stop mattering',
    (value, settings) => value === '0' || settings.referenceKeys !== undefined,
  ],
  [/^USE_DOG_STATSD_MOGRIFIERS$/, 'read only with USE_DOG_STATSD, which tollgate refuses'],
  [
    /^DISABLE_STATS$/,
    'the metrics are served on GET /metrics in any case, and statsd only with USE_STATSD=true',
    isFalse,
  ],
  // Envoy Gateway's mapping, at this path, gives the series the names tollgate serves.
  [
    /^PROMETHEUS_MAPPER_YAML$/,
    "tollgate's series have names of their own (docs/operations.md)",
    (value) => value === '/etc/statsd-exporter/conf.yaml',
  ],
  [
    /^PROMETHEUS_RESPONSE_TIME_AS_MILLISECONDS$/,
    'durations are in seconds (docs/operations.md)',
    isFalse,
  ],
  // The rules directory is watched and polled (CONFIG_POLL_INTERVAL): changes are seen either way.
  [
    /^RUNTIME_WATCH_ROOT$/,
    'the rules directory is watched as a whole',
    (value) => booleanWord(value) !== undefined,
  ],
  [
    /^RUNTIME_IGNOREDOTFILES$/,
    'dotfiles in the rules directory are always skipped',
    (value) => booleanWord(value) === true,
  ],
  [
    /^TRACING_ENABLED$/,
    'tracing is on when OTEL_EXPORTER_OTLP_ENDPOINT (or OTEL_EXPORTER_OTLP_TRACES_ENDPOINT) is set, and OTEL_SDK_DISABLED=true turns it off',
    (value, _, env) => booleanWord(value) === tracingOn(env),
  ],
  [
    /^TRACING_SAMPLING_RATE$/,
    'every trace is sampled unless its caller says not; OTEL_TRACES_SAMPLER=parentbased_traceidratio with OTEL_TRACES_SAMPLER_ARG samples a share',
    (value) => Number(value) === 1,
  ],
  [
    /^TRACING_EXPORTER_PROTOCOL$/,
    'the protocol is OTEL_EXPORTER_OTLP_PROTOCOL (http/protobuf, or grpc)',
    (value, _, env) =>
      value.toLowerCase() === 'http' ||
      (env.OTEL_EXPORTER_OTLP_TRACES_PROTOCOL || env.OTEL_EXPORTER_OTLP_PROTOCOL || '')
        .toLowerCase()
        .startsWith(value.toLowerCase()),
  ],
];

/**
 * Settings that tollgate reads only in some modes: set outside them, they do nothing. Read from
 * the parsed settings, so that every boolean means what settings.ts read.
 */
function modeWarnings(settings: Settings, env: Env): string[] {
  const warnings: string[] = [];
  if (settings.compatMode !== 'reference' && settings.stopIncrementWhenOverLimit) {
    warnings.push(
      'STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT=true is read only under COMPAT_MODE=reference: ' +
        'without it, a denied request never increments any counter',
    );
  }
  const debug = setNames(env, (name) => name === 'DEBUG_HOST' || name === 'DEBUG_PORT');
  if (debug.length > 0 && settings.rlconfig.on !== 'debug') {
    warnings.push(
      `${debug.join(', ')} ${debug.length === 1 ? 'is' : 'are'} set but RLCONFIG=${settings.rlconfig.on === 'http' ? 'on' : 'off'}: ` +
        'there is no debug listener (RLCONFIG=debug serves /rlconfig there)',
    );
  }
  if (settings.xds === undefined) {
    const set = setNames(env, (name) =>
      /^(CONFIG_GRPC_XDS_|XDS_CLIENT_|XDS_REFUSE_EMPTY_UPDATE$|FORCE_START_WITHOUT_INITIAL_CONFIG$|HEALTHY_WITH_AT_LEAST_ONE_CONFIG_LOADED$)/.test(
        name,
      ),
    );
    if (set.length > 0) {
      warnings.push(
        `${set.join(', ')} ${set.length === 1 ? 'is' : 'are'} set but read only with ` +
          'CONFIG_TYPE=GRPC_XDS_SOTW: the rules come from files (CONFIG_PATH)',
      );
    }
  }
  if (settings.statsd === undefined) {
    const set = setNames(env, (name) =>
      [
        'STATSD_HOST',
        'STATSD_PORT',
        'STATSD_PROTOCOL',
        'STATS_FLUSH_INTERVAL',
        'EXTRA_TAGS',
      ].includes(name),
    );
    if (set.length > 0) {
      warnings.push(
        `${set.join(', ')} ${set.length === 1 ? 'is' : 'are'} set but statsd is off: ` +
          'tollgate sends statsd only with USE_STATSD=true (the reference sends it by default)',
      );
    }
  }
  return warnings;
}

/** The names set (not empty) that `pick` chooses, sorted; service links are not settings. */
function setNames(env: Env, pick: (name: string) => boolean): string[] {
  return Object.keys(env)
    .filter((name) => pick(name) && !!env[name] && !isServiceLink(name, env[name] as string))
    .sort();
}

/** One warning per reference setting that is set and not honoured, naming it and its value. */
function ignoredReferenceSettings(settings: Settings, env: Env): string[] {
  const warnings: string[] = [];
  for (const name of Object.keys(env).sort()) {
    const value = env[name];
    if (value === undefined || value === '' || isServiceLink(name, value)) continue;
    const known = REFERENCE_ONLY.find(([pattern]) => pattern.test(name));
    if (known === undefined) continue;
    const [, why, harmless] = known;
    if (harmless?.(value, settings, env)) continue;
    // Some of these hold credentials (REDIS_PERSECOND_AUTH): those are named without a value.
    const shown = /AUTH|URL|PASS|SECRET|KEY|CERT|HOST_PORT/.test(name) ? name : `${name}=${value}`;
    warnings.push(`${shown} is set but not used by tollgate: ${why}`);
  }
  return warnings;
}

/**
 * Every warning of start-up, one line each: a Node line run only by TOLLGATE_ALLOW_UNSUPPORTED_NODE,
 * settings read only in other modes, reference settings not honoured, and variables that look
 * like settings but are none. What cannot be honoured was refused before (settings.ts, serve.ts).
 */
export function startupWarnings(
  settings: Settings,
  env: Env,
  nodeVersion: string = process.versions.node,
): string[] {
  const node = checkNodeLine(nodeVersion, env);
  return [
    ...(node === undefined ? [] : [node]),
    ...modeWarnings(settings, env),
    ...ignoredReferenceSettings(settings, env),
    ...lookalikeWarnings(env),
  ];
}

/** The fields of the start-up line, once both servers listen. */
export function listeningReport(
  settings: Settings,
  ports: ListeningPorts,
  rules: { source: string; loaded: RuleSet | undefined },
): Record<string, unknown> {
  return {
    grpc: settings.grpcUds ?? `${settings.grpcHost}:${ports.grpcPort}`,
    http: `${settings.host}:${ports.httpPort}`,
    ...(settings.prometheus && ports.metricsPort !== undefined
      ? {
          metrics: `${settings.prometheus.host ?? ''}:${ports.metricsPort}${settings.prometheus.path}`,
        }
      : {}),
    ...(settings.rlconfig.on === 'debug' && ports.debugPort !== undefined
      ? { rlconfig: `${settings.rlconfig.host}:${ports.debugPort}/rlconfig` }
      : {}),
    store: describeStore(settings),
    rules: {
      source: rules.source,
      ...(rules.loaded ? countRules(rules.loaded) : { domains: 0, rules: 0 }),
    },
    failureMode: settings.failureMode,
    ...(settings.redis ? { redisTimeoutMs: settings.redis.timeoutMs } : {}),
    // A cut-over keeps the reference's environment, whose REDIS_TIMEOUT default is 10 s.
    ...(settings.redis && settings.compatMode === 'reference'
      ? {
          redisTimeout:
            `${settings.redis.timeoutMs}ms: a Redis call that takes longer answers per FAILURE_MODE ` +
            "(the reference's default is 10s, past Envoy's 20 ms timeout; see docs/migration.md)",
        }
      : {}),
    compatMode: settings.compatMode,
    ...(settings.referenceKeys
      ? {
          compatKeys:
            "reference: the reference's own counters, shared with it (one call per key, windows " +
            "on this instance's clock, keys outside tg:*); see docs/migration.md",
        }
      : {}),
    // The reference sends statsd unless told not to; tollgate only when asked.
    statsd: settings.statsd
      ? `${settings.statsd.protocol}://${settings.statsd.host}:${settings.statsd.port}`
      : 'off (USE_STATSD=true to send it; the reference sends it by default)',
    // Calendar windows follow this tz database: Node lines ship different ones.
    tz: process.versions.tz ?? 'unknown',
  };
}
