/**
 * What every command shares: argument parsing with usage errors, `k=v,k2=v2` descriptors, and
 * loading one domain's rules with the environment's settings.
 */
import { parseArgs, type ParseArgsConfig } from 'node:util';
import type { Entry } from '../core/check.js';
import { checkRules, loadRules, type LoadRulesOptions } from '../rules/loadRules.js';
import type { DomainRules, RuleSet } from '../rules/types.js';
import { readSettings, type Settings } from '../process/settings.js';

export interface Command {
  name: string;
  /** One line for `tollgate --help`. */
  summary: string;
  /** The whole `--help` text. */
  usage: string;
  /** Resolves with the exit code; throws UsageError (exit 2) or another error (exit 1). */
  run(args: string[]): Promise<number>;
}

/** The command line is wrong: exit 2, with the command's usage. */
export class UsageError extends Error {
  override readonly name = 'UsageError';
}

/** The command could not do its job for a reason the message explains: exit 1. */
export class CommandError extends Error {
  override readonly name = 'CommandError';
}

export const DESCRIPTOR_HELP = `A descriptor is key=value entries joined by commas, in order: tenant=acme,route=/orders.
A value may contain '='; the entry splits at the first one. A backslash takes the next
character literally: write \\, for a comma in a key or value and \\\\ for a backslash
(in a shell, inside single quotes: --descriptor 'q=a\\,b').`;

/**
 * A command's arguments when its only option is --help: its positional arguments, or undefined
 * when --help asked for the usage, which is then printed.
 */
export function positionalsOrHelp(args: string[], usage: string): string[] | undefined {
  const { values, positionals } = parse({
    args,
    options: { help: { type: 'boolean', short: 'h' } },
    allowPositionals: true,
  });
  if (!values.help) return positionals;
  console.log(usage);
  return undefined;
}

/**
 * node:util's parseArgs (strict by default), with its errors turned into UsageError. A string
 * option takes the next argument as its value even when it starts with a dash, as `--hits -3`
 * means, where parseArgs would call it ambiguous; one that looks like an option is refused.
 */
export function parse<T extends ParseArgsConfig>(config: T): ReturnType<typeof parseArgs<T>> {
  const args = config.args && config.options ? joinValues(config.args, config.options) : undefined;
  try {
    return parseArgs(args === undefined ? config : { ...config, args });
  } catch (error) {
    const code = (error as { code?: unknown }).code;
    if (typeof code === 'string' && code.startsWith('ERR_PARSE_ARGS')) {
      throw new UsageError((error as Error).message);
    }
    throw error;
  }
}

type Options = NonNullable<ParseArgsConfig['options']>;

/** `--name VALUE` as `--name=VALUE` for each string option, up to a `--`. */
function joinValues(args: readonly string[], options: Options): string[] {
  const spellings = new Map<string, string>();
  const shorts = new Set<string>();
  for (const [name, option] of Object.entries(options)) {
    if (option.short !== undefined) shorts.add(`-${option.short}`);
    if (option.type !== 'string') continue;
    spellings.set(`--${name}`, `--${name}`);
    if (option.short !== undefined) spellings.set(`-${option.short}`, `--${name}`);
  }
  const joined: string[] = [];
  for (let i = 0; i < args.length; i++) {
    const arg = args[i] as string;
    if (arg === '--') return [...joined, ...args.slice(i)];
    const long = spellings.get(arg);
    if (long === undefined) {
      joined.push(arg);
      continue;
    }
    const value = args[i + 1];
    if (value === undefined) throw new UsageError(`${arg} needs a value`);
    if (value.startsWith('--') || shorts.has(value)) {
      throw new UsageError(`${arg} needs a value, and '${value}' is an option`);
    }
    joined.push(`${long}=${value}`);
    i++;
  }
  return joined;
}

/**
 * A whole-number option, from 0 to `max`; undefined when it is absent. The message names the
 * option, its range and the fault.
 */
export function wholeNumber(
  text: string | undefined,
  option: string,
  max: number,
): number | undefined {
  if (text === undefined) return undefined;
  const fault = /^\s*-/.test(text)
    ? 'is negative'
    : !/^\d+$/.test(text)
      ? 'is not a whole number'
      : BigInt(text) > BigInt(max)
        ? 'is too large'
        : undefined;
  if (fault !== undefined) {
    throw new UsageError(`${option} must be a whole number from 0 to ${max}: '${text}' ${fault}`);
  }
  return Number(text);
}

export function required<T>(value: T | undefined, option: string): T {
  if (value === undefined) throw new UsageError(`${option} is required`);
  return value;
}

/** `k=v,k2=v2` into entries; see DESCRIPTOR_HELP. */
export function parseDescriptor(text: string): Entry[] {
  const entries: Entry[] = [];
  let key: string | undefined;
  let current = '';
  const finish = () => {
    if (key === undefined) {
      throw new UsageError(`descriptor '${text}': entry '${current}' is not key=value`);
    }
    if (key === '') throw new UsageError(`descriptor '${text}': an entry has an empty key`);
    entries.push({ key, value: current });
    key = undefined;
    current = '';
  };
  for (let i = 0; i < text.length; i++) {
    const char = text[i] as string;
    if (char === '\\' && i + 1 < text.length) current += text[++i];
    else if (char === '=' && key === undefined) [key, current] = [current, ''];
    else if (char === ',') finish();
    else current += char;
  }
  finish();
  return entries;
}

/** Entries as the command line writes them, for output. */
export const showEntries = (entries: readonly Entry[]): string =>
  entries
    .map(({ key, value }) => `${key.replace(/[\\,=]/g, '\\$&')}=${value.replace(/[\\,]/g, '\\$&')}`)
    .join(',');

/** The environment's settings (DEFAULT_ALGORITHM, CONFIG_PATH, REDIS_*, ...); read once. */
let cached: Settings | undefined;
export function environment(): Settings {
  cached ??= readSettings(process.env);
  return cached;
}

/** How the service loads rules, from the environment. */
function loadOptions(): LoadRulesOptions {
  const settings = environment();
  return {
    defaultAlgorithm: settings.defaultAlgorithm,
    mergeDomainConfig: settings.mergeDomainConfig,
    referenceKeys: settings.referenceKeys,
  };
}

/** The rules at `configPath`, or else the environment's CONFIG_PATH, loaded as the service would. */
export function loadConfig(configPath: string | undefined): RuleSet {
  return loadRules(configPath ?? environment().configPath, loadOptions());
}

/** The same rules checked: the rules, or the error of every bad file (see checkRules). */
export function checkConfigAt(configPath: string | undefined): ReturnType<typeof checkRules> {
  return checkRules(configPath ?? environment().configPath, loadOptions());
}

/** One domain's rules; see loadConfig. */
export function loadDomain(configPath: string | undefined, domain: string): DomainRules {
  const rules = loadConfig(configPath);
  const found = rules.domains.get(domain);
  if (found === undefined) {
    const known = [...rules.domains.keys()].join(', ');
    throw new CommandError(`no domain '${domain}' in the rules (domains: ${known})`);
  }
  return found;
}
