/**
 * Which environment variables are settings: tollgate's own (SETTING_NAMES, the names settings.ts
 * reads), envoyproxy/ratelimit's, and a few that other parts and programs read. A variable that
 * is none of these but looks like one (a known name within an edit or two, or a settings prefix
 * such as REDIS_) draws a warning naming the likely setting: a typo never passes unseen.
 */
import { SERVICE_LINK_VALUE, type Env } from '../core/envValues.js';
import { ALLOW_UNSUPPORTED_NODE } from '../core/nodeLines.js';
import { SETTING_NAMES } from './settings.js';

/**
 * envoyproxy/ratelimit's settings (its src/settings/settings.go, and a few of its newer main),
 * whether tollgate reads them or not.
 */
export const REFERENCE_NAMES = [
  'BACKEND_TYPE',
  'CACHE_KEY_PREFIX',
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
  'CONFIG_TYPE',
  'DEBUG_HOST',
  'DEBUG_PORT',
  'DISABLE_STATS',
  'EXPIRATION_JITTER_MAX_SECONDS',
  'EXTRA_TAGS',
  'FORCE_START_WITHOUT_INITIAL_CONFIG',
  'GRPC_CLIENT_TLS_CACERT',
  'GRPC_CLIENT_TLS_SAN',
  'GRPC_HOST',
  'GRPC_MAX_CONNECTION_AGE',
  'GRPC_MAX_CONNECTION_AGE_GRACE',
  'GRPC_PORT',
  'GRPC_SERVER_TLS_CERT',
  'GRPC_SERVER_TLS_KEY',
  'GRPC_SERVER_USE_TLS',
  'GRPC_UDS',
  'HEALTHY_WITH_AT_LEAST_ONE_CONFIG_LOADED',
  'HOST',
  'LIMIT_LIMIT_HEADER',
  'LIMIT_REMAINING_HEADER',
  'LIMIT_RESET_HEADER',
  'LIMIT_RESPONSE_HEADERS_ENABLED',
  'LOCAL_CACHE_SIZE_IN_BYTES',
  'LOG_FORMAT',
  'LOG_LEVEL',
  'MEMCACHE_HOST_PORT',
  'MEMCACHE_MAX_IDLE_CONNS',
  'MEMCACHE_SRV',
  'MEMCACHE_SRV_REFRESH',
  'MEMCACHE_TLS',
  'MEMCACHE_TLS_CACERT',
  'MEMCACHE_TLS_CLIENT_CERT',
  'MEMCACHE_TLS_CLIENT_KEY',
  'MEMCACHE_TLS_SKIP_HOSTNAME_VERIFICATION',
  'MERGE_DOMAIN_CONFIG',
  'NEAR_LIMIT_RATIO',
  'PORT',
  'PROMETHEUS_ADDR',
  'PROMETHEUS_MAPPER_YAML',
  'PROMETHEUS_PATH',
  'PROMETHEUS_RESPONSE_TIME_AS_MILLISECONDS',
  'QUOTA_MODE',
  'REDIS_AUTH',
  'REDIS_CLUSTER_PIPELINE_PARALLELISM',
  'REDIS_HEALTH_CHECK_ACTIVE_CONNECTION',
  'REDIS_PERSECOND',
  'REDIS_PERSECOND_AUTH',
  'REDIS_PERSECOND_PIPELINE_LIMIT',
  'REDIS_PERSECOND_PIPELINE_WINDOW',
  'REDIS_PERSECOND_POOL_ON_EMPTY_BEHAVIOR',
  'REDIS_PERSECOND_POOL_SIZE',
  'REDIS_PERSECOND_SENTINEL_AUTH',
  'REDIS_PERSECOND_SOCKET_TYPE',
  'REDIS_PERSECOND_TIMEOUT',
  'REDIS_PERSECOND_TLS',
  'REDIS_PERSECOND_TYPE',
  'REDIS_PERSECOND_URL',
  'REDIS_PIPELINE_LIMIT',
  'REDIS_PIPELINE_WINDOW',
  'REDIS_POOL_ON_EMPTY_BEHAVIOR',
  'REDIS_POOL_SIZE',
  'REDIS_SENTINEL_AUTH',
  'REDIS_SOCKET_TYPE',
  'REDIS_STARTUP_INITIAL_INTERVAL',
  'REDIS_STARTUP_MAX_ELAPSED_TIME',
  'REDIS_STARTUP_MAX_INTERVAL',
  'REDIS_TIMEOUT',
  'REDIS_TLS',
  'REDIS_TLS_CACERT',
  'REDIS_TLS_CLIENT_CERT',
  'REDIS_TLS_CLIENT_KEY',
  'REDIS_TLS_SKIP_HOSTNAME_VERIFICATION',
  'REDIS_TYPE',
  'REDIS_URL',
  'RESPONSE_DYNAMIC_METADATA',
  'RUNTIME_APPDIRECTORY',
  'RUNTIME_IGNOREDOTFILES',
  'RUNTIME_ROOT',
  'RUNTIME_SUBDIRECTORY',
  'RUNTIME_WATCH_ROOT',
  'SHADOW_MODE',
  'STATSD_HOST',
  'STATSD_PORT',
  'STATS_FLUSH_INTERVAL',
  'STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT',
  'TRACING_ENABLED',
  'TRACING_EXPORTER_PROTOCOL',
  'TRACING_SAMPLING_RATE',
  'TRACING_SERVICE_INSTANCE_ID',
  'TRACING_SERVICE_NAME',
  'TRACING_SERVICE_NAMESPACE',
  'USE_DOG_STATSD',
  'USE_DOG_STATSD_MOGRIFIERS',
  'USE_PROMETHEUS',
  'USE_STATSD',
  'XDS_CLIENT_BACKOFF_INITIAL_INTERVAL',
  'XDS_CLIENT_BACKOFF_JITTER',
  'XDS_CLIENT_BACKOFF_MAX_INTERVAL',
  'XDS_CLIENT_BACKOFF_RANDOM_FACTOR',
  'XDS_CLIENT_MAX_MSG_SIZE_IN_BYTES',
] as const;

/** Read elsewhere than settings.ts, or set by other programs for tollgate's process. */
const OTHER_NAMES = [
  ALLOW_UNSUPPORTED_NODE,
  // process/workers.ts marks its workers with it.
  'TOLLGATE_CLUSTER_WORKER',
  // Envoy Gateway sets it beside GRPC_SERVER_USE_TLS; neither the reference nor tollgate reads it
  // (a client CA is GRPC_CLIENT_TLS_CACERT), so it changes nothing in either.
  'GRPC_SERVER_TLS_CA_CERT',
  // grpc-js reads these itself.
  'GRPC_TRACE',
  'GRPC_VERBOSITY',
  'GRPC_SSL_CIPHER_SUITES',
  'GRPC_DEFAULT_SSL_ROOTS_FILE_PATH',
];
/** The OpenTelemetry SDK's variables, and grpc-js's families of them. */
const OTHER_PREFIXES = /^(OTEL_|GRPC_NODE_|GRPC_EXPERIMENTAL_)/;

/** Prefixes of settings: an unknown name that starts with one is taken for a mistyped setting. */
const SETTING_PREFIXES = [
  'CONFIG_',
  'GRPC_',
  'LIMIT_',
  'MEMCACHE_',
  'PROMETHEUS_',
  'RATELIMIT_',
  'REDIS_',
  'RLQS_',
  'RUNTIME_',
  'STATSD_',
  'STATS_',
  'TOLLGATE_',
  'TRACING_',
  'XDS_',
];

const KNOWN: ReadonlySet<string> = new Set<string>([
  ...SETTING_NAMES,
  ...REFERENCE_NAMES,
  ...OTHER_NAMES,
]);
/** What a near miss is compared with: the settings of tollgate and of the reference. */
const CANDIDATES: readonly string[] = [...new Set<string>([...SETTING_NAMES, ...REFERENCE_NAMES])];

export function isKnownName(name: string): boolean {
  return KNOWN.has(name) || OTHER_PREFIXES.test(name);
}

/**
 * A Kubernetes service link: for each Service of the namespace the kubelet sets `X_SERVICE_HOST`,
 * `X_SERVICE_PORT[_NAME]`, `X_PORT=tcp://ip:port` and `X_PORT_N_PROTO[_PROTO|_PORT|_ADDR]`.
 */
export function isServiceLink(name: string, value: string): boolean {
  return (
    /_SERVICE_HOST$|_SERVICE_PORT(_[A-Z0-9_]+)?$|_PORT_\d+_(TCP|UDP|SCTP)(_(PROTO|PORT|ADDR))?$/.test(
      name,
    ) ||
    (/_PORT$/.test(name) && SERVICE_LINK_VALUE.test(value))
  );
}

/** One warning per variable that looks like a setting and is none, naming the likely one. */
export function lookalikeWarnings(env: Env): string[] {
  const warnings: string[] = [];
  for (const name of Object.keys(env).sort()) {
    const value = env[name];
    if (!value || isKnownName(name) || isServiceLink(name, value)) continue;
    const likely = likelySetting(name);
    const prefix = SETTING_PREFIXES.find((start) => name.startsWith(start));
    if (likely !== undefined) {
      warnings.push(`${name} is not a setting, and nothing reads it: did you mean ${likely}?`);
    } else if (prefix !== undefined) {
      warnings.push(
        `${name} is not a setting, and nothing reads it, though it starts as the ${prefix}* ` +
          'settings do (docs/settings.md lists them)',
      );
    }
  }
  return warnings;
}

/**
 * The setting `name` most likely means: the same in upper case, or the nearest within a small
 * edit distance (one edit for a name of up to 6 letters, two for a longer one, and a quarter of
 * its length for one that starts with a settings prefix).
 */
export function likelySetting(name: string): string | undefined {
  const upper = name.toUpperCase();
  if (upper !== name && KNOWN.has(upper)) return upper;
  const prefixed = SETTING_PREFIXES.some((start) => upper.startsWith(start));
  const most = prefixed ? Math.max(2, Math.floor(name.length / 4)) : name.length <= 6 ? 1 : 2;
  let best: { name: string; distance: number } | undefined;
  for (const candidate of CANDIDATES) {
    if (Math.abs(candidate.length - upper.length) > most) continue;
    const distance = editDistance(upper, candidate);
    if (distance <= most && (best === undefined || distance < best.distance)) {
      best = { name: candidate, distance };
    }
  }
  return best?.name;
}

/** Optimal string alignment distance: insertions, deletions, substitutions, transpositions. */
export function editDistance(a: string, b: string): number {
  const width = b.length + 1;
  // Three rows of the table: two back (for transpositions), the previous and the current one.
  let before = new Uint16Array(width);
  let previous = new Uint16Array(width);
  let current = new Uint16Array(width);
  for (let j = 0; j < width; j++) previous[j] = j;
  for (let i = 1; i <= a.length; i++) {
    current[0] = i;
    for (let j = 1; j < width; j++) {
      const cost = a.charCodeAt(i - 1) === b.charCodeAt(j - 1) ? 0 : 1;
      let distance = Math.min(
        (previous[j] as number) + 1,
        (current[j - 1] as number) + 1,
        (previous[j - 1] as number) + cost,
      );
      if (
        i > 1 &&
        j > 1 &&
        a.charCodeAt(i - 1) === b.charCodeAt(j - 2) &&
        a.charCodeAt(i - 2) === b.charCodeAt(j - 1)
      ) {
        distance = Math.min(distance, (before[j - 2] as number) + 1);
      }
      current[j] = distance;
    }
    [before, previous, current] = [previous, current, before];
  }
  return previous[b.length] as number;
}
