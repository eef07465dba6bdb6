/**
 * The loaded rules as text for `GET /rlconfig`, in the spirit of the reference's dump: one line
 * per rule that has a limit or is unlimited, named by its stats key.
 */

import { formatDuration } from '../core/duration.js';
import { rulesInFileOrder } from './parseRules.js';
import type { RuleNode, RuleSet } from './types.js';

/** The reference's stats key of a rule below its domain: each level's `key` or `key_value`. */
function ruleKey(node: RuleNode): string {
  const parts: string[] = [];
  for (let at: RuleNode | undefined = node; at !== undefined; at = at.parent) {
    parts.push(at.metricPart);
  }
  return parts.reverse().join('.');
}

function describeRule(node: RuleNode): string {
  const fields: string[] = [];
  const limit = node.limit;
  if (limit === undefined) {
    fields.push('unlimited');
  } else {
    const window = limit.calendar
      ? `calendar=${limit.calendar.period} time_zone=${limit.calendar.zone}`
      : limit.unit === undefined
        ? `window=${formatDuration(limit.windowMs)}`
        : `unit=${limit.unit.toUpperCase()}`;
    fields.push(`${window} requests_per_unit=${limit.requestsPerUnit}`);
    fields.push(`algorithm=${limit.algorithm}`);
    if (limit.algorithm === 'token_bucket') fields.push(`burst=${limit.burst}`);
    if (limit.name !== '') fields.push(`name=${limit.name}`);
  }
  const replaces = node.replaces;
  if (replaces.length > 0) fields.push(`replaces=${replaces.join(',')}`);
  fields.push(`shadow_mode: ${node.shadowMode}`);
  if (node.quotaMode) fields.push('quota_mode: true');
  if (limit?.overdraw === true) fields.push('overdraw: true');
  if (node.shareThreshold) fields.push('share_threshold: true');
  return fields.join(', ');
}

function sortedDomains(rules: RuleSet) {
  return [...rules.domains.values()].sort((a, b) =>
    a.domain < b.domain ? -1 : a.domain > b.domain ? 1 : 0,
  );
}

/**
 * One line per limited or unlimited rule: domains in name order, rules in file order (each rule
 * before the rules nested in it), e.g.
 * `api.tenant_acme.route: window=30s requests_per_unit=100, algorithm=sliding_window, shadow_mode: false`.
 */
export function dumpRules(rules: RuleSet): string[] {
  const lines: string[] = [];
  for (const domain of sortedDomains(rules)) {
    for (const node of rulesInFileOrder(domain.root)) {
      if (node.limit === undefined && !node.unlimited) continue;
      lines.push(`${domain.domain}.${ruleKey(node)}: ${describeRule(node)}`);
    }
  }
  return lines;
}

/** How long one piece of a dump may hold the event loop, in ms, before it yields. */
const SLICE_MS = 5;

/** A dump as /rlconfig sends it, and what its build took. */
export interface RulesDumpText {
  body: Buffer;
  lines: number;
  buildMs: number;
}

/**
 * The text of `dumpRules(rules)` after the `head` lines, one line each, built in pieces of a few
 * milliseconds: the dump of a hundred thousand rules takes far longer than a check may wait.
 */
export async function dumpRulesText(
  rules: RuleSet | undefined,
  head: readonly string[],
): Promise<RulesDumpText> {
  const started = performance.now();
  const pieces: Buffer[] = [];
  let lines = head.length;
  let piece = head.map((line) => `${line}\n`).join('');
  let sliceStart = performance.now();
  const domains = rules === undefined ? [] : sortedDomains(rules);
  for (const domain of domains) {
    for (const node of rulesInFileOrder(domain.root)) {
      if (node.limit === undefined && !node.unlimited) continue;
      piece += `${domain.domain}.${ruleKey(node)}: ${describeRule(node)}\n`;
      lines++;
      if (lines % 32 === 0 && performance.now() - sliceStart > SLICE_MS) {
        pieces.push(Buffer.from(piece));
        piece = '';
        await new Promise((resolve) => setImmediate(resolve));
        sliceStart = performance.now();
      }
    }
  }
  pieces.push(Buffer.from(piece));
  return { body: Buffer.concat(pieces), lines, buildMs: performance.now() - started };
}

/**
 * /rlconfig's dumps, one per rules version: built on the first request for that version, shared
 * by the requests that come while it is built, and kept until the rules change.
 */
export function createRulesDumps(
  onBuilt: (dump: RulesDumpText) => void,
): (rules: RuleSet | undefined, head: readonly string[]) => Promise<RulesDumpText> {
  // The rules are held weakly: rules replaced by a reload are not kept alive by their dump.
  let last:
    { rules: WeakRef<RuleSet> | undefined; head: string; dump: Promise<RulesDumpText> } | undefined;
  return (rules, head) => {
    const headText = head.join('\n');
    const held = last?.rules;
    const same = rules === undefined ? held === undefined : held?.deref() === rules;
    if (last !== undefined && same && last.head === headText) return last.dump;
    const dump = dumpRulesText(rules, head);
    const entry = { rules: rules && new WeakRef(rules), head: headText, dump };
    last = entry;
    dump.then(onBuilt, () => {
      // Not kept: the next request builds it again.
      if (last === entry) last = undefined;
    });
    return dump;
  };
}
