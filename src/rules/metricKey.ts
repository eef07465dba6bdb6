import type { Entry } from '../core/check.js';
import type { RuleNode } from './types.js';

/**
 * The reference's stats key below the domain for a matched descriptor, one part per level, as the
 * reference builds it:
 * - `detailed_metric` on the matched rule: every level is `key_<request value>`, but for a level
 *   matched through a `share_threshold` wildcard, which keeps `key_<pattern>` (and then a level
 *   whose request value is empty is `key` alone);
 * - otherwise each level is its node's `key` or `key_value` as configured, except `value_to_metric`
 *   at a bare key or a wildcard without `share_threshold`, which is `key_<request value>` (`key`
 *   alone for an empty value).
 * `detailed` says the key holds request values, so the metrics must cap its series.
 *
 * A key that holds no request value is the node's alone: it is made once and kept with the node.
 */
export function metricKeyOf(
  node: RuleNode,
  entries: readonly Entry[],
): { parts: readonly string[]; detailed: boolean } {
  const known = fixedKeys.get(node);
  if (known !== undefined) return known;
  const key = buildMetricKey(node, entries);
  if (!key.detailed) fixedKeys.set(node, key);
  return key;
}

const fixedKeys = new WeakMap<RuleNode, { parts: readonly string[]; detailed: boolean }>();

function buildMetricKey(
  node: RuleNode,
  entries: readonly Entry[],
): { parts: readonly string[]; detailed: boolean } {
  const parts = new Array<string>(entries.length);
  let detailed = false;
  let sharing = false;
  if (node.detailedMetric) {
    for (let at: RuleNode | undefined = node; at !== undefined; at = at.parent) {
      if (sharesWildcard(at)) sharing = true;
    }
  }
  let level = entries.length - 1;
  for (let at: RuleNode | undefined = node; at !== undefined; at = at.parent, level--) {
    const value = entries[level]?.value ?? '';
    let part = at.metricPart;
    if (node.detailedMetric) {
      if (!sharesWildcard(at)) {
        part = sharing && value === '' ? at.key : `${at.key}_${value}`;
        detailed = true;
      }
    } else if (
      at.valueToMetric &&
      (at.value === undefined || isWildcard(at)) &&
      !sharesWildcard(at)
    ) {
      part = value === '' ? at.key : `${at.key}_${value}`;
      detailed = true;
    }
    parts[level] = statName(part);
  }
  return { parts, detailed };
}

const isWildcard = (node: RuleNode): boolean => node.value?.includes('*') === true;
const sharesWildcard = (node: RuleNode): boolean => node.shareThreshold && isWildcard(node);

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
