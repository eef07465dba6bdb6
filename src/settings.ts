import { fileURLToPath } from 'node:url';
import { join } from 'node:path';
import { parseGoDuration } from './duration.js';
import { SettingsError } from './errors.js';
import { ALGORITHMS, type Algorithm } from './rules/types.js';

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
  /** A rules file or a directory of them. */
  configPath: string;
  redis: RedisSettings | undefined;
  failureMode: FailureMode;
  clock: 'redis' | 'local';
  defaultAlgorithm: Algorithm;
  cacheKeyPrefix: string;
  shadowMode: boolean;
  maxDescriptors: number;
  maxEntries: number;
  maxEntryBytes: number;
  workers: number;
  logLevel: LogLevel;
  logFormat: 'json' | 'text';
}

export type FailureMode = 'error' | 'deny' | 'allow';
export type LogLevel = 'trace' | 'debug' | 'info' | 'warn' | 'error' | 'fatal' | 'silent';

export interface RedisSettings {
  type: 'single';
  host: string;
  port: number;
  username: string | undefined;
  password: string | undefined;
  db: number;
  tls: boolean;
  timeoutMs: number;
}

export const BUNDLED_RULES = fileURLToPath(new URL('../config/example.yaml', import.meta.url));

type Env = Record<string, string | undefined>;

export function readSettings(env: Env = process.env): Settings {
  const get = (name: string, fallback: string): string => env[name] ?? fallback;
  const configPath = env.CONFIG_PATH
    ? env.CONFIG_PATH
    : env.RUNTIME_ROOT
      ? join(
          env.RUNTIME_ROOT,
          get('RUNTIME_SUBDIRECTORY', ''),
          get('RUNTIME_APPDIRECTORY', 'config'),
        )
      : BUNDLED_RULES;

  const settings: Settings = {
    grpcHost: get('GRPC_HOST', '0.0.0.0'),
    grpcPort: integer(env, 'GRPC_PORT', 8081, 0, 65_535),
    grpcUds: env.GRPC_UDS || undefined,
    host: get('HOST', '0.0.0.0'),
    port: integer(env, 'PORT', 8080, 0, 65_535),
    configPath,
    redis: readRedis(env),
    failureMode: oneOf(env, 'FAILURE_MODE', ['error', 'deny', 'allow'] as const, 'error'),
    clock: oneOf(env, 'CLOCK', ['redis', 'local'] as const, 'redis'),
    defaultAlgorithm: oneOf(env, 'DEFAULT_ALGORITHM', ALGORITHMS, 'sliding_window'),
    cacheKeyPrefix: get('CACHE_KEY_PREFIX', ''),
    shadowMode: boolean(env, 'SHADOW_MODE', false),
    maxDescriptors: integer(env, 'MAX_DESCRIPTORS', 64, 1, 100_000),
    maxEntries: integer(env, 'MAX_ENTRIES', 16, 1, 10_000),
    maxEntryBytes: integer(env, 'MAX_ENTRY_BYTES', 1024, 1, 1 << 24),
    workers: integer(env, 'WORKERS', 1, 1, 1024),
    logLevel: oneOf(
      env,
      'LOG_LEVEL',
      ['trace', 'debug', 'info', 'warn', 'error', 'fatal', 'silent'] as const,
      'info',
    ),
    logFormat: oneOf(env, 'LOG_FORMAT', ['json', 'text'] as const, 'json'),
  };

  if (/[{}]/.test(settings.cacheKeyPrefix)) {
    throw new SettingsError(
      'CACHE_KEY_PREFIX: may not contain { or }, which Redis reads as a hash tag',
    );
  }
  if (settings.workers > 1 && !settings.redis) {
    throw new SettingsError('WORKERS: more than 1 needs REDIS_URL, since workers share no memory');
  }
  // Settings that later work implements stop start-up rather than being ignored.
  if (settings.workers > 1) throw new SettingsError('WORKERS: more than 1 is not supported yet');
  if (settings.shadowMode) throw new SettingsError('SHADOW_MODE: not supported yet');
  return settings;
}

/** The Redis settings are validated even without REDIS_URL, so a typo never waits for later. */
function readRedis(env: Env): RedisSettings | undefined {
  const type = oneOf(env, 'REDIS_TYPE', ['single', 'sentinel', 'cluster'] as const, 'single', true);
  const timeoutMs = duration(env, 'REDIS_TIMEOUT', '15ms');
  const tlsDefault = boolean(env, 'REDIS_TLS', false);
  const url = env.REDIS_URL;
  if (!url) return undefined;
  if (type !== 'single') throw new SettingsError(`REDIS_TYPE: '${type}' is not supported yet`);

  const [authUser, authPassword] = splitAuth(env.REDIS_AUTH);
  const withScheme = /^[a-z+]+:\/\//i.test(url) ? url : `redis://${url}`;
  let parsed: URL;
  try {
    parsed = new URL(withScheme);
  } catch {
    throw new SettingsError(
      `REDIS_URL: '${url}' is not redis://[user:pass@]host:port[/db] or host:port`,
    );
  }
  if (parsed.protocol !== 'redis:' && parsed.protocol !== 'rediss:') {
    throw new SettingsError(`REDIS_URL: scheme '${parsed.protocol}' is not redis: or rediss:`);
  }
  const db = parsed.pathname.replace(/^\//, '');
  if (db !== '' && !/^\d+$/.test(db)) {
    throw new SettingsError(`REDIS_URL: database '${db}' is not a number`);
  }
  const port = parsed.port === '' ? 6379 : Number(parsed.port);
  return {
    type,
    host: parsed.hostname.replace(/^\[|\]$/g, ''),
    port,
    username: decodeURIComponent(parsed.username) || authUser,
    password: decodeURIComponent(parsed.password) || authPassword,
    db: db === '' ? 0 : Number(db),
    tls: parsed.protocol === 'rediss:' || tlsDefault,
    timeoutMs,
  };
}

/** REDIS_AUTH is `password` or `user:password`, as in the reference. */
function splitAuth(auth: string | undefined): [string | undefined, string | undefined] {
  if (!auth) return [undefined, undefined];
  const colon = auth.indexOf(':');
  return colon < 0 ? [undefined, auth] : [auth.slice(0, colon), auth.slice(colon + 1)];
}

function integer(env: Env, name: string, fallback: number, min: number, max: number): number {
  const text = env[name];
  if (text === undefined || text === '') return fallback;
  if (!/^\d+$/.test(text) || Number(text) < min || Number(text) > max) {
    throw new SettingsError(`${name}: '${text}' is not a whole number from ${min} to ${max}`);
  }
  return Number(text);
}

function boolean(env: Env, name: string, fallback: boolean): boolean {
  const text = env[name];
  if (text === undefined || text === '') return fallback;
  const lower = text.toLowerCase();
  if (['true', '1', 'yes', 'on'].includes(lower)) return true;
  if (['false', '0', 'no', 'off'].includes(lower)) return false;
  throw new SettingsError(`${name}: '${text}' is not true or false`);
}

function oneOf<T extends string>(
  env: Env,
  name: string,
  choices: readonly T[],
  fallback: T,
  anyCase = false,
): T {
  const text = env[name];
  if (text === undefined || text === '') return fallback;
  const value = anyCase ? text.toLowerCase() : text;
  if (!(choices as readonly string[]).includes(value)) {
    throw new SettingsError(`${name}: '${text}' is not one of ${choices.join(', ')}`);
  }
  return value as T;
}

function duration(env: Env, name: string, fallback: string): number {
  const text = env[name] || fallback;
  let ms: number;
  try {
    ms = parseGoDuration(text);
  } catch (error) {
    throw new SettingsError(
      `${name}: '${text}' is not a duration such as 15ms or 1s (${(error as Error).message})`,
    );
  }
  if (ms < 1) throw new SettingsError(`${name}: '${text}' must be at least 1ms`);
  return Math.ceil(ms);
}
