import type { RuleLevel, RuleNode } from './types.js';

/** One depth of rules, indexed as `matchRule` looks them up. */
export const emptyLevel = (): RuleLevel => ({ exact: new Map(), wildcards: [], bare: new Map() });

/**
 * Places a validated rule in its level: by key when it has no value, in file order among the
 * wildcards when its value holds a '*', else by key and value.
 */
export function placeRule(level: RuleLevel, rule: RuleNode): void {
  if (rule.value === undefined) {
    level.bare.set(rule.key, rule);
  } else if (rule.value.includes('*')) {
    level.wildcards.push({ key: rule.key, parts: rule.value.split('*'), node: rule });
  } else {
    const byValue = level.exact.get(rule.key) ?? new Map<string, RuleNode>();
    level.exact.set(rule.key, byValue.set(rule.value, rule));
  }
}
