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
    const window =
      limit.unit === undefined
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

/**
 * One line per limited or unlimited rule: domains in name order, rules in file order (each rule
 * before the rules nested in it), e.g.
 * `api.tenant_acme.route: window=30s requests_per_unit=100, algorithm=sliding_window, shadow_mode: false`.
 */
export function dumpRules(rules: RuleSet): string[] {
  const lines: string[] = [];
  const domains = [...rules.domains.values()].sort((a, b) =>
    a.domain < b.domain ? -1 : a.domain > b.domain ? 1 : 0,
  );
  for (const domain of domains) {
    for (const node of rulesInFileOrder(domain.root)) {
      if (node.limit === undefined && !node.unlimited) continue;
      lines.push(`${domain.domain}.${ruleKey(node)}: ${describeRule(node)}`);
    }
  }
  return lines;
}
