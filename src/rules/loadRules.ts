/**
 * Reads the rules: one YAML file, or a directory of `*.yaml`/`*.yml` files, one domain each.
 * Synchronous because it runs at start-up and on reload, before any request depends on it.
 */

import { readFileSync, readdirSync, statSync } from 'node:fs';
import { basename, join } from 'node:path';
import { LineCounter, parseDocument } from 'yaml';
import { RulesError } from '../errors.js';
import { parseRules, type ParseRulesOptions } from './parseRules.js';
import type { DomainRules, RuleSet } from './types.js';

export type LoadRulesOptions = ParseRulesOptions;

function isFile(path: string): boolean {
  try {
    return statSync(path).isFile();
  } catch (err) {
    throw new RulesError(`cannot read rules: ${(err as Error).message}`, { cause: err });
  }
}

/**
 * The rules files under `configPath`, sorted by name. Dotfiles are skipped, which also skips the
 * `..data` directory of a Kubernetes ConfigMap mount; `statSync` follows its symlinked files.
 */
function ruleFiles(configPath: string): string[] {
  if (isFile(configPath)) return [configPath];
  const files = readdirSync(configPath)
    .filter((name) => !name.startsWith('.') && (name.endsWith('.yaml') || name.endsWith('.yml')))
    .sort()
    .map((name) => join(configPath, name))
    .filter(isFile);
  // An empty rules directory would silently allow every request, so it is a mistake to report.
  if (files.length === 0) {
    throw new RulesError(
      `${basename(configPath)}: no *.yaml or *.yml rules files in the directory`,
    );
  }
  return files;
}

/** Parses as YAML 1.1, like the reference's Go decoder: `yes` is true and `0755` is octal. */
function parseFile(path: string, options: LoadRulesOptions): DomainRules {
  const file = basename(path);
  let text: string;
  try {
    text = readFileSync(path, 'utf8');
  } catch (err) {
    throw new RulesError(`${file}: cannot read: ${(err as Error).message}`, { cause: err });
  }
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
}

/** Loads every rules file under `configPath` into one `RuleSet`; throws `RulesError` on any problem. */
export function loadRules(configPath: string, options: LoadRulesOptions): RuleSet {
  const domains = new Map<string, DomainRules>();
  for (const path of ruleFiles(configPath)) {
    const rules = parseFile(path, options);
    const previous = domains.get(rules.domain);
    if (previous !== undefined) {
      throw new RulesError(
        `${rules.file}: domain: '${rules.domain}' is already defined in ${previous.file}`,
      );
    }
    domains.set(rules.domain, rules);
  }
  return { domains };
}
