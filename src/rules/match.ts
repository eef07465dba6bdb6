/**
 * Finds the rule a descriptor lands on, with the reference's semantics. This runs for every
 * descriptor of every request, so it allocates nothing and uses no regex.
 */

import type { Entry } from '../core/check.js';
import type { DomainRules, RuleLevel, RuleNode } from './types.js';

/** Whether `value` matches a '*' pattern split into `parts` (at least two of them). */
export function matchesParts(value: string, parts: readonly string[]): boolean {
  const first = parts[0] ?? '';
  const last = parts[parts.length - 1] ?? '';
  const end = value.length - last.length;
  if (end < first.length || !value.startsWith(first) || !value.endsWith(last)) return false;
  // Leftmost placement of each middle part leaves the most room for the rest: no backtracking.
  let from = first.length;
  for (let i = 1; i < parts.length - 1; i++) {
    const part = parts[i] ?? '';
    const at = value.indexOf(part, from);
    if (at < 0 || at + part.length > end) return false;
    from = at + part.length;
  }
  return true;
}

/** The node for one entry at one level: exact value, then first wildcard in file order, then bare key. */
export function matchLevel(level: RuleLevel, entry: Entry): RuleNode | undefined {
  const exact = level.exact.get(entry.key)?.get(entry.value);
  if (exact !== undefined) return exact;
  for (const wildcard of level.wildcards) {
    if (wildcard.key === entry.key && matchesParts(entry.value, wildcard.parts)) {
      return wildcard.node;
    }
  }
  return level.bare.get(entry.key);
}

/**
 * The rule for a descriptor's entries, or undefined when none applies. The walk descends one
 * level per entry; only the node the last entry reaches counts, and only if it has a limit or
 * is unlimited. A descriptor deeper or shallower than the rules matches nothing.
 */
export function matchRule(rules: DomainRules, entries: readonly Entry[]): RuleNode | undefined {
  let level = rules.root;
  let node: RuleNode | undefined;
  for (const entry of entries) {
    node = matchLevel(level, entry);
    if (node === undefined) return undefined;
    level = node.children;
  }
  return node !== undefined && (node.limit !== undefined || node.unlimited) ? node : undefined;
}
