/**
 * What every command shares: argument parsing with usage errors, `k=v,k2=v2` descriptors, and
 * loading one domain's rules with the environment's settings.
 */
import { parseArgs, type ParseArgsConfig } from 'node:util';
import type { Entry } from '../core/check.js';
import { loadRules } from '../rules/loadRules.js';
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

/** node:util's parseArgs (strict by default), with its errors turned into UsageError. */
export function parse<T extends ParseArgsConfig>(config: T): ReturnType<typeof parseArgs<T>> {
  try {
    return parseArgs(config);
  } catch (error) {
    const code = (error as { code?: unknown }).code;
    if (typeof code === 'string' && code.startsWith('ERR_PARSE_ARGS')) {
      throw new UsageError((error as Error).message);
    }
    throw error;
  }
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

/** The rules at `configPath`, or else the environment's CONFIG_PATH, loaded as the service would. */
export function loadConfig(configPath: string | undefined): RuleSet {
  const settings = environment();
  return loadRules(configPath ?? settings.configPath, {
    defaultAlgorithm: settings.defaultAlgorithm,
    mergeDomainConfig: settings.mergeDomainConfig,
  });
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
