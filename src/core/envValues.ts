import { parseGoDuration } from './duration.js';
import { SettingsError } from './errors.js';

/**
 * Readers of one environment variable each, for `process/settings.ts`. An unset or empty variable takes
 * the default; a bad one throws a SettingsError that names it. Each reader's `name` must be a key
 * of its `env`'s type, so an `env` typed with the known names (as settings.ts types it) refuses
 * to compile a read of any other name.
 */
export type Env = Record<string, string | undefined>;
/** An environment that may hold only the names N. */
export type NamedEnv<N extends string> = Partial<Record<N, string>>;

/** The booleans a setting may take, in any case; docs/settings.md lists the same. */
export const TRUE_WORDS = ['true', '1', 'yes', 'on'] as const;
export const FALSE_WORDS = ['false', '0', 'no', 'off'] as const;

/**
 * A Kubernetes service link, as the kubelet injects one for every Service of the namespace:
 * `NAME_PORT=tcp://10.0.0.1:8125` and its kin. When such a value lands on a setting (a Service
 * named statsd or grpc), the message says so.
 */
export const SERVICE_LINK_VALUE = /^(tcp|udp|sctp):\/\/[^\s/]+:\d+$/i;

function serviceLinkHint(value: string): string {
  return SERVICE_LINK_VALUE.test(value)
    ? " (a Kubernetes service link's value: a Service of that name injects it; set the value " +
        'explicitly, or enableServiceLinks: false in the pod spec)'
    : '';
}

export function text<N extends string>(
  env: NamedEnv<N>,
  name: NoInfer<N>,
  fallback: string,
): string {
  const value = env[name];
  return value === undefined || value === '' ? fallback : value;
}

export function optional<N extends string>(env: NamedEnv<N>, name: NoInfer<N>): string | undefined {
  return env[name] || undefined;
}

export function integer<N extends string>(
  env: NamedEnv<N>,
  name: NoInfer<N>,
  fallback: number,
  min: number,
  max: number,
): number {
  const value = env[name];
  if (value === undefined || value === '') return fallback;
  if (!/^\d+$/.test(value) || Number(value) < min || Number(value) > max) {
    throw new SettingsError(
      `${name}: '${value}' is not a whole number from ${min} to ${max}${serviceLinkHint(value)}`,
    );
  }
  return Number(value);
}

export function ratio<N extends string>(
  env: NamedEnv<N>,
  name: NoInfer<N>,
  fallback: number,
): number {
  const value = env[name];
  if (value === undefined || value === '') return fallback;
  const number = Number(value);
  if (!/^\d*\.?\d+$/.test(value) || number < 0 || number > 1) {
    throw new SettingsError(`${name}: '${value}' is not a number from 0 to 1`);
  }
  return number;
}

/** A word of TRUE_WORDS or FALSE_WORDS, in any case, as its boolean; undefined for any other. */
export function booleanWord(value: string): boolean | undefined {
  const lower = value.toLowerCase();
  if ((TRUE_WORDS as readonly string[]).includes(lower)) return true;
  if ((FALSE_WORDS as readonly string[]).includes(lower)) return false;
  return undefined;
}

/** The one reader of a boolean setting: TRUE_WORDS or FALSE_WORDS, in any case. */
export function boolean<N extends string>(
  env: NamedEnv<N>,
  name: NoInfer<N>,
  fallback: boolean,
): boolean {
  const value = env[name];
  if (value === undefined || value === '') return fallback;
  const word = booleanWord(value);
  if (word !== undefined) return word;
  throw new SettingsError(`${name}: '${value}' is not true or false`);
}

/** One of `choices`, written in any case. */
export function oneOf<T extends string, N extends string>(
  env: NamedEnv<N>,
  name: NoInfer<N>,
  choices: readonly T[],
  fallback: T,
): T {
  const value = env[name];
  if (value === undefined || value === '') return fallback;
  const normal = value.toLowerCase();
  if (!(choices as readonly string[]).includes(normal)) {
    throw new SettingsError(`${name}: '${value}' is not one of ${choices.join(', ')}`);
  }
  return normal as T;
}

/** A Go duration in whole milliseconds, rounded up; `min` is the smallest allowed. */
export function duration<N extends string>(
  env: NamedEnv<N>,
  name: NoInfer<N>,
  fallback: string,
  min = 1,
): number {
  const value = env[name] || fallback;
  let ms: number;
  try {
    ms = parseGoDuration(value);
  } catch (error) {
    throw new SettingsError(
      `${name}: '${value}' is not a duration such as 15ms or 1s (${(error as Error).message})`,
    );
  }
  if (ms < min) throw new SettingsError(`${name}: '${value}' must be at least ${min}ms`);
  return Math.ceil(ms);
}
