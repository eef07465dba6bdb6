/**
 * What an operator should read at start-up: one line naming what runs (the store, the rules, the
 * failure mode), and a warning for each setting of envoyproxy/ratelimit that is set but that
 * tollgate does not honour, so that a migration that forgot REDIS_URL, or relies on memcache,
 * shows at once. No credential is ever named.
 */
import type { RuleSet } from '../rules/types.js';
import { rulesInFileOrder } from '../rules/parseRules.js';
import type { ListeningPorts } from '../servers/servers.js';
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

/**
 * envoyproxy/ratelimit's settings that tollgate does not read, with what an operator should know
 * when one is set. A value that asks for what tollgate does anyway is no warning.
 */
const REFERENCE_ONLY: readonly [RegExp, string, ((value: string) => boolean)?][] = [
  [/^BACKEND_TYPE$/, 'counters are in Redis (REDIS_URL) or in memory', (v) => /^redis$/i.test(v)],
  [/^MEMCACHE_/, 'there is no memcache store; counters are in Redis (REDIS_URL) or in memory'],
  [
    /^LOCAL_CACHE_SIZE_IN_BYTES$/,
    'the over-limit cache is OVER_LIMIT_CACHE_SIZE, in entries (under COMPAT_MODE=reference, a size above 0 turns it on)',
    (v) => v === '0',
  ],
  [/^REDIS_PERSECOND/, 'per-second limits share the one Redis of REDIS_URL'],
  [
    /^REDIS_(POOL_SIZE|POOL_ON_EMPTY_BEHAVIOR|PIPELINE_WINDOW|PIPELINE_LIMIT|CLUSTER_PIPELINE_PARALLELISM)$/,
    'tollgate uses one connection and batches calls itself (REDIS_BATCH_LIMIT)',
  ],
  [/^REDIS_(SENTINEL_AUTH|HEALTH_CHECK_ACTIVE_CONNECTION|STARTUP_.*)$/, 'not used by tollgate'],
  [/^EXPIRATION_JITTER_MAX_SECONDS$/, 'counters expire exactly when they stop mattering'],
  [
    /^(USE_DOG_STATSD|USE_DOG_STATSD_MOGRIFIERS|DISABLE_STATS)$/,
    "statsd goes out in the reference's plain form (USE_STATSD=true), and metrics are on GET /metrics",
    (v) => /^(false|0)$/i.test(v),
  ],
  [
    /^(PROMETHEUS_MAPPER_YAML|PROMETHEUS_RESPONSE_TIME_AS_MILLISECONDS)$/,
    "tollgate's metrics have names of their own (docs/operations.md), and durations are in seconds",
  ],
  [
    /^(RUNTIME_WATCH_ROOT|RUNTIME_IGNOREDOTFILES)$/,
    'the rules directory is watched as a whole, and dotfiles are skipped',
  ],
  [/^TRACING_/, 'tracing reads the OTEL_* variables'],
];

/**
 * Reference settings that tollgate reads only in some modes: set outside them, they do nothing.
 */
function modeWarnings(env: Record<string, string | undefined>): string[] {
  const warnings: string[] = [];
  const reference = /^reference$/i.test(env.COMPAT_MODE ?? '');
  if (!reference && /^(true|1)$/i.test(env.STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT ?? '')) {
    warnings.push(
      'STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT=true is read only under COMPAT_MODE=reference: ' +
        'without it, a denied request never increments any counter',
    );
  }
  const debug = ['DEBUG_HOST', 'DEBUG_PORT'].filter((name) => (env[name] ?? '') !== '');
  const rlconfig = (env.RLCONFIG ?? '').toLowerCase();
  if (debug.length > 0 && (rlconfig === 'on' || rlconfig === 'off')) {
    warnings.push(
      `${debug.join(', ')} ${debug.length === 1 ? 'is' : 'are'} set but RLCONFIG=${rlconfig}: ` +
        'there is no debug listener (RLCONFIG=debug serves /rlconfig there)',
    );
  }
  if (!/^grpc_xds_sotw$/i.test(env.CONFIG_TYPE ?? '')) {
    const set = Object.keys(env)
      .filter(
        (name) =>
          (env[name] ?? '') !== '' &&
          /^(CONFIG_GRPC_XDS_|XDS_CLIENT_|FORCE_START_WITHOUT_INITIAL_CONFIG$|HEALTHY_WITH_AT_LEAST_ONE_CONFIG_LOADED$)/.test(
            name,
          ),
      )
      .sort();
    if (set.length > 0) {
      warnings.push(
        `${set.join(', ')} ${set.length === 1 ? 'is' : 'are'} set but read only with ` +
          'CONFIG_TYPE=GRPC_XDS_SOTW: the rules come from files (CONFIG_PATH)',
      );
    }
  }
  if (!/^(true|1)$/i.test(env.USE_STATSD ?? '')) {
    const set = [
      'STATSD_HOST',
      'STATSD_PORT',
      'STATSD_PROTOCOL',
      'STATS_FLUSH_INTERVAL',
      'EXTRA_TAGS',
    ].filter((name) => (env[name] ?? '') !== '');
    if (set.length > 0) {
      warnings.push(
        `${set.join(', ')} ${set.length === 1 ? 'is' : 'are'} set but statsd is off: ` +
          'tollgate sends statsd only with USE_STATSD=true (the reference sends it by default)',
      );
    }
  }
  return warnings;
}

/** One warning per reference setting that is set and not honoured, naming it and its value. */
export function ignoredReferenceSettings(env: Record<string, string | undefined>): string[] {
  const warnings: string[] = modeWarnings(env);
  for (const [name, value] of Object.entries(env).sort(([a], [b]) => (a < b ? -1 : 1))) {
    if (value === undefined || value === '') continue;
    const known = REFERENCE_ONLY.find(([pattern]) => pattern.test(name));
    if (known === undefined) continue;
    const [, why, harmless] = known;
    if (harmless?.(value)) continue;
    // Some of these hold credentials (REDIS_PERSECOND_AUTH): those are named without a value.
    const shown = /AUTH|URL|PASS|SECRET|KEY|CERT|HOST_PORT/.test(name) ? name : `${name}=${value}`;
    warnings.push(`${shown} is set but not used by tollgate: ${why}`);
  }
  return warnings;
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
    compatMode: settings.compatMode,
    // The reference sends statsd unless told not to; tollgate only when asked.
    statsd: settings.statsd
      ? `${settings.statsd.protocol}://${settings.statsd.host}:${settings.statsd.port}`
      : 'off (USE_STATSD=true to send it; the reference sends it by default)',
  };
}
