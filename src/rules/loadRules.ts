/**
 * Reads the rules: one YAML file, or a directory of `*.yaml`/`*.yml` files, one domain each.
 * Synchronous: at start-up it runs before anything is served, and a reload runs it on a worker
 * thread (loadOffThread.ts). Every file is bounded: its size, its aliases and what they expand to
 * (readNodes.ts), and only regular files are read.
 */

import {
  closeSync,
  constants,
  fstatSync,
  openSync,
  readSync,
  readdirSync,
  statSync,
  type Stats,
} from 'node:fs';
import { basename, join } from 'node:path';
import { LineCounter, parseDocument } from 'yaml';
import { RulesError } from '../core/errors.js';
import { mergeDomain, parseRules, rulesInFileOrder, type ParseRulesOptions } from './parseRules.js';
import type { DomainRules, RuleSet } from './types.js';

export interface LoadRulesOptions extends ParseRulesOptions {
  /**
   * MERGE_DOMAIN_CONFIG: a domain may be defined in several files, whose top-level rules then
   * join one tree in file order. Without it, a domain defined twice is an error.
   */
  mergeDomainConfig?: boolean;
}

function isDirectory(path: string): boolean {
  try {
    return statSync(path).isDirectory();
  } catch (err) {
    throw new RulesError(`cannot read rules: ${(err as Error).message}`, { cause: err });
  }
}

/**
 * The rules files under `configPath`, sorted by name. Dotfiles are skipped, which also skips the
 * `..data` directory of a Kubernetes ConfigMap mount; `statSync` follows its symlinked files. A
 * directory named like a rules file is skipped too; anything else that is not a regular file
 * stays, for `readRulesFile` to refuse by name.
 */
function ruleFiles(configPath: string): string[] {
  if (!isDirectory(configPath)) return [configPath];
  const files = readdirSync(configPath)
    .filter((name) => !name.startsWith('.') && (name.endsWith('.yaml') || name.endsWith('.yml')))
    .sort()
    .map((name) => join(configPath, name))
    .filter((file) => !isDirectory(file));
  // An empty rules directory would silently allow every request, so it is a mistake to report.
  if (files.length === 0) {
    throw new RulesError(
      `${basename(configPath)}: no *.yaml or *.yml rules files in the directory`,
    );
  }
  return files;
}

/** A rules file this large is a mistake or an attack, and would take seconds to parse. */
export const MAX_RULES_FILE_BYTES = 4 * 1024 * 1024;

/**
 * A rules file's text. Only a regular file is read, its links followed: a FIFO would block the
 * read until something wrote to it, and a device such as /dev/zero would never end. The size is
 * checked on the open file before reading, and the read stops one byte past the limit whatever
 * the file grew to meanwhile. O_NONBLOCK keeps even the open of a FIFO from waiting for a writer.
 */
function readRulesFile(path: string, file: string): string {
  let fd: number | undefined;
  try {
    fd = openSync(path, constants.O_RDONLY | constants.O_NONBLOCK);
    const stats = fstatSync(fd);
    if (!stats.isFile()) throw new RulesError(`${file}: is ${kindOf(stats)}, not a regular file`);
    if (stats.size > MAX_RULES_FILE_BYTES) {
      throw new RulesError(
        `${file}: is ${stats.size} bytes, over the limit of ${MAX_RULES_FILE_BYTES}`,
      );
    }
    // Room for the file as it is, and a byte to see it grow; more only if it does.
    let buffer: Buffer = Buffer.alloc(Math.min(stats.size + 1, MAX_RULES_FILE_BYTES + 1));
    let length = 0;
    for (;;) {
      if (length === buffer.length) buffer = grown(buffer);
      const read = readSync(fd, buffer, length, buffer.length - length, null);
      if (read === 0) break;
      length += read;
      if (length > MAX_RULES_FILE_BYTES) {
        throw new RulesError(`${file}: grew past the limit of ${MAX_RULES_FILE_BYTES} bytes`);
      }
    }
    return buffer.toString('utf8', 0, length);
  } catch (err) {
    if (err instanceof RulesError) throw err;
    throw new RulesError(`${file}: cannot read: ${(err as Error).message}`, { cause: err });
  } finally {
    if (fd !== undefined) closeSync(fd);
  }
}

/** A copy of a full read buffer with twice the room, up to one byte past the limit. */
function grown(buffer: Buffer): Buffer {
  const larger = Buffer.alloc(Math.min(buffer.length * 2, MAX_RULES_FILE_BYTES + 1));
  buffer.copy(larger);
  return larger;
}

function kindOf(stats: Stats): string {
  if (stats.isFIFO()) return 'a FIFO';
  if (stats.isCharacterDevice()) return 'a character device';
  if (stats.isBlockDevice()) return 'a block device';
  if (stats.isSocket()) return 'a socket';
  if (stats.isDirectory()) return 'a directory';
  return 'not a file';
}

/** Parses as YAML 1.1, like the reference's Go decoder: `yes` is true and `0755` is octal. */
function parseFile(path: string, options: LoadRulesOptions): DomainRules {
  const file = basename(path);
  const text = readRulesFile(path, file);
  try {
    const lines = new LineCounter();
    const doc = parseDocument(text, {
      version: '1.1',
      intAsBigInt: true,
      prettyErrors: false,
      lineCounter: lines,
    });
    const problem = doc.errors[0] ?? doc.warnings[0];
    if (problem !== undefined) {
      const { line, col } = lines.linePos(problem.pos[0]);
      throw new RulesError(
        `${file}: invalid YAML at line ${line}, column ${col}: ${problem.message}`,
      );
    }
    return parseRules(doc, file, options);
  } catch (err) {
    // Nesting deep enough to exhaust the stack, in the parser or in the readers.
    if (err instanceof RangeError) {
      throw new RulesError(`${file}: nests too deep to read (${err.message})`, { cause: err });
    }
    throw err;
  }
}

/**
 * `replaces` names are scoped to their domain: once the domain is whole (merges included), each
 * must be the name of a limit in it.
 */
function checkReplaces(rules: DomainRules): void {
  const names = new Set<string>();
  const nodes = rulesInFileOrder(rules.root);
  for (const node of nodes) if (node.limit !== undefined) names.add(node.limit.name);
  for (const node of nodes) {
    node.replaces.forEach((name, i) => {
      if (!names.has(name)) {
        throw new RulesError(
          `${node.file}: ${node.path}.rate_limit.replaces[${i}].name: ` +
            `no limit named '${name}' in domain '${rules.domain}'`,
        );
      }
    });
  }
}

/** Loads every rules file under `configPath` into one `RuleSet`; throws `RulesError` on any problem. */
export function loadRules(configPath: string, options: LoadRulesOptions): RuleSet {
  return combineDomains(
    ruleFiles(configPath).map((path) => parseFile(path, options)),
    options,
  );
}

/**
 * Every problem of the rules under `configPath`, for `tollgate check-config`: each bad file's
 * error, and once every file reads, the errors between files (a domain defined twice, a
 * `replaces` with no such limit). The rules when there is none.
 */
export function checkRules(
  configPath: string,
  options: LoadRulesOptions,
): { rules: RuleSet; problems: [] } | { rules: undefined; problems: RulesError[] } {
  const parsed: DomainRules[] = [];
  const problems: RulesError[] = [];
  for (const path of ruleFiles(configPath)) {
    try {
      parsed.push(parseFile(path, options));
    } catch (err) {
      if (!(err instanceof RulesError)) throw err;
      problems.push(err);
    }
  }
  if (problems.length > 0) return { rules: undefined, problems };
  try {
    return { rules: combineDomains(parsed, options), problems: [] };
  } catch (err) {
    if (!(err instanceof RulesError)) throw err;
    return { rules: undefined, problems: [err] };
  }
}

/**
 * One rule set from each source's domain (a file, or an xDS resource), in order: a domain given
 * twice is an error, or merges with MERGE_DOMAIN_CONFIG.
 */
export function combineDomains(parsed: DomainRules[], options: LoadRulesOptions): RuleSet {
  const domains = new Map<string, DomainRules>();
  /** The file that gave each merged domain its tenant_key. */
  const tenantKeyFiles = new Map<string, string>();
  for (const rules of parsed) {
    const previous = domains.get(rules.domain);
    if (previous === undefined) {
      domains.set(rules.domain, rules);
      if (rules.tenantKey !== undefined) tenantKeyFiles.set(rules.domain, rules.file);
      continue;
    }
    if (options.mergeDomainConfig !== true) {
      throw new RulesError(
        `${rules.file}: domain: '${rules.domain}' is already defined in ${previous.file} ` +
          '(MERGE_DOMAIN_CONFIG=true merges them)',
      );
    }
    if (rules.tenantKey !== undefined) {
      if (previous.tenantKey !== undefined && previous.tenantKey !== rules.tenantKey) {
        throw new RulesError(
          `${rules.file}: tenant_key: '${rules.tenantKey}' differs from '${previous.tenantKey}' ` +
            `in ${tenantKeyFiles.get(rules.domain) ?? previous.file} for the same domain '${rules.domain}'`,
        );
      }
      if (previous.tenantKey === undefined) tenantKeyFiles.set(rules.domain, rules.file);
      previous.tenantKey = rules.tenantKey;
    }
    mergeDomain(previous, rules);
  }
  for (const rules of domains.values()) checkReplaces(rules);
  return { domains };
}
