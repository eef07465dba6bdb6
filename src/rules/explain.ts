/**
 * Why a descriptor lands on the rule it does: the walk of `matchRule`, level by level, recording
 * what was tried and what matched. For operators (`tollgate explain`), not the hot path, so it
 * may allocate freely. test/unit/explain.test.ts checks that it always agrees with `matchRule`.
 */

import type { Entry } from '../core/check.js';
import { formatDuration } from '../core/duration.js';
import { matchesParts } from './match.js';
import type { DomainRules, Limit, RuleLevel, RuleNode } from './types.js';

export type Precedence = 'exact' | 'wildcard' | 'bare';

/** One rule considered for an entry, in the order `matchRule` considers them. */
export interface Attempt {
  kind: Precedence;
  /** The exact value or '*' pattern tried; undefined for the bare key. */
  value: string | undefined;
  /** Where the rule is (`rules.yaml descriptors[0]`), or undefined when the level has none. */
  rule: string | undefined;
  matched: boolean;
}

/** One entry of the descriptor and the level of rules it was matched against. */
export interface ExplainStep {
  /** The entry's index in the descriptor. */
  index: number;
  entry: Entry;
  attempts: Attempt[];
  /** The rule this entry landed on, if any. */
  node: RuleNode | undefined;
  matchedBy: Precedence | undefined;
}

export interface Explanation {
  steps: ExplainStep[];
  /** The rule that applies: always what `matchRule` returns for the same entries. */
  node: RuleNode | undefined;
  /** One sentence: which limit applies, or why none does. */
  reason: string;
}

/** A rule's place in its file, e.g. `rules.yaml descriptors[0].descriptors[1]`. */
export const whereIs = (node: RuleNode): string => `${node.file} ${node.path}`;

/** A limit in the rules file's words: `requests_per_unit=10 unit=minute algorithm=...`. */
export function describeLimit(limit: Limit): string {
  const span = limit.calendar
    ? `calendar=${limit.calendar.period} time_zone=${limit.calendar.zone}`
    : limit.unit !== undefined
      ? `unit=${limit.unit}`
      : `window=${formatDuration(limit.windowMs)}`;
  let text = `requests_per_unit=${limit.requestsPerUnit} ${span} algorithm=${limit.algorithm}`;
  if (limit.algorithm === 'token_bucket') text += ` burst=${limit.burst}`;
  if (limit.name !== '') text += ` name=${JSON.stringify(limit.name)}`;
  return text;
}

export function explainMatch(rules: DomainRules, entries: readonly Entry[]): Explanation {
  const steps: ExplainStep[] = [];
  if (entries.length === 0) {
    return { steps, node: undefined, reason: 'the descriptor has no entries' };
  }
  let level = rules.root;
  let parent: RuleNode | undefined;
  for (const [index, entry] of entries.entries()) {
    const step = explainLevel(level, entry, index);
    steps.push(step);
    if (step.node === undefined) {
      const shown = `entry ${index + 1} (${entry.key}=${entry.value})`;
      const reason =
        parent !== undefined && isEmptyLevel(level)
          ? `no rule: the descriptor is longer than the rules; ${whereIs(parent)} has no nested descriptors for ${shown}`
          : `no rule: nothing matches ${shown}${parent ? ` under ${whereIs(parent)}` : ''}`;
      return { steps, node: undefined, reason };
    }
    parent = step.node;
    level = step.node.children;
  }
  const node = parent as RuleNode;
  if (node.limit !== undefined) {
    return { steps, node, reason: `limited by ${whereIs(node)}: ${describeLimit(node.limit)}` };
  }
  if (node.unlimited) {
    return { steps, node, reason: `unlimited by ${whereIs(node)}: never limited, no counter` };
  }
  const reason = isEmptyLevel(node.children)
    ? `no rule: ${whereIs(node)} has no rate_limit`
    : `no rule: the descriptor is shorter than the rules; ${whereIs(node)} has no rate_limit, only nested descriptors`;
  return { steps, node: undefined, reason };
}

/** `matchLevel` of match.ts, recording each rule it considers. */
function explainLevel(level: RuleLevel, entry: Entry, index: number): ExplainStep {
  const attempts: Attempt[] = [];
  const done = (node: RuleNode | undefined, matchedBy: Precedence | undefined): ExplainStep => ({
    index,
    entry,
    attempts,
    node,
    matchedBy,
  });

  const exact = level.exact.get(entry.key)?.get(entry.value);
  attempts.push({
    kind: 'exact',
    value: entry.value,
    rule: exact && whereIs(exact),
    matched: exact !== undefined,
  });
  if (exact !== undefined) return done(exact, 'exact');

  for (const wildcard of level.wildcards) {
    if (wildcard.key !== entry.key) continue;
    const matched = matchesParts(entry.value, wildcard.parts);
    attempts.push({
      kind: 'wildcard',
      value: wildcard.parts.join('*'),
      rule: whereIs(wildcard.node),
      matched,
    });
    if (matched) return done(wildcard.node, 'wildcard');
  }

  const bare = level.bare.get(entry.key);
  attempts.push({
    kind: 'bare',
    value: undefined,
    rule: bare && whereIs(bare),
    matched: bare !== undefined,
  });
  return bare !== undefined ? done(bare, 'bare') : done(undefined, undefined);
}

function isEmptyLevel(level: RuleLevel): boolean {
  return level.exact.size === 0 && level.wildcards.length === 0 && level.bare.size === 0;
}
