import type { Entry } from '../check.js';
import type { RuleNode } from './types.js';

/**
 * The reference's stats key below the domain for a matched descriptor, one part per level: the
 * node's `key` or `key_value` as configured, or `key_<request value>` where `value_to_metric`
 * asks for it at a bare key, or `detailed_metric` at the last level. `detailed` says the key
 * holds request values, so the metrics must cap its series.
 */
export function metricKeyOf(
  node: RuleNode,
  entries: readonly Entry[],
): { parts: string[]; detailed: boolean } {
  const parts = new Array<string>(entries.length);
  let detailed = false;
  let level = entries.length - 1;
  for (let at: RuleNode | undefined = node; at !== undefined; at = at.parent, level--) {
    const bare = at.value === undefined;
    const withValue = bare && (at.valueToMetric || (at === node && at.detailedMetric));
    if (withValue) detailed = true;
    parts[level] = statName(withValue ? `${at.key}_${entries[level]?.value ?? ''}` : at.metricPart);
  }
  return { parts, detailed };
}

/** The stats key of a descriptor no rule describes (a limit override): every entry's value. */
export function entriesMetricKey(entries: readonly Entry[]): string[] {
  return entries.map((entry) =>
    statName(entry.value === '' ? entry.key : `${entry.key}_${entry.value}`),
  );
}

const IPV4 = /\d{1,3}\.\d{1,3}\.\d{1,3}\.\d{1,3}/g;

/**
 * A stats key part as the reference writes it: ':' and '|' (statsd's separators) become '_', and
 * so do the dots of an IPv4 address, which statsd would read as the name's separators.
 */
export function statName(part: string): string {
  if (!/[:|.]/.test(part)) return part;
  return part.replace(/[:|]/g, '_').replace(IPV4, (ip) => ip.replaceAll('.', '_'));
}
