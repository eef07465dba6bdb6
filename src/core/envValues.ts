import { parseGoDuration } from './duration.js';
import { SettingsError } from './errors.js';

/**
 * Readers of one environment variable each, for `process/settings.ts`. An unset or empty variable takes
 * the default; a bad one throws a SettingsError that names it.
 */
export type Env = Record<string, string | undefined>;

export function text(env: Env, name: string, fallback: string): string {
  const value = env[name];
  return value === undefined || value === '' ? fallback : value;
}

export function optional(env: Env, name: string): string | undefined {
  return env[name] || undefined;
}

export function integer(
  env: Env,
  name: string,
  fallback: number,
  min: number,
  max: number,
): number {
  const value = env[name];
  if (value === undefined || value === '') return fallback;
  if (!/^\d+$/.test(value) || Number(value) < min || Number(value) > max) {
    throw new SettingsError(`${name}: '${value}' is not a whole number from ${min} to ${max}`);
  }
  return Number(value);
}

export function ratio(env: Env, name: string, fallback: number): number {
  const value = env[name];
  if (value === undefined || value === '') return fallback;
  const number = Number(value);
  if (!/^\d*\.?\d+$/.test(value) || number < 0 || number > 1) {
    throw new SettingsError(`${name}: '${value}' is not a number from 0 to 1`);
  }
  return number;
}

export function boolean(env: Env, name: string, fallback: boolean): boolean {
  const value = env[name];
  if (value === undefined || value === '') return fallback;
  const lower = value.toLowerCase();
  if (['true', '1', 'yes', 'on'].includes(lower)) return true;
  if (['false', '0', 'no', 'off'].includes(lower)) return false;
  throw new SettingsError(`${name}: '${value}' is not true or false`);
}

/** One of `choices`, written in any case. */
export function oneOf<T extends string>(
  env: Env,
  name: string,
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
export function duration(env: Env, name: string, fallback: string, min = 1): number {
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
