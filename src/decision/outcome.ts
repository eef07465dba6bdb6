import type { Check, Decision } from '../core/check.js';
import type { StoreError } from '../core/errors.js';

/**
 * What the limiter reports about each check, for observers (metrics, tracing, logs). It is
 * called once per check, after the decision, and must not throw.
 */
export type CheckObserver = (event: CheckEvent) => void;

export interface CheckEvent {
  check: Check;
  /** The decision sent back, including one made by FAILURE_MODE after a store failure. */
  decision: Decision | undefined;
  /** Set when the store failed; the decision (if any) then came from FAILURE_MODE. */
  storeError: StoreError | undefined;
  /** Time spent in the store, in milliseconds; 0 when the store was not called. */
  storeMs: number;
  /** The domain had no rules: every descriptor was answered OK without touching the store. */
  unknownDomain: boolean;
  /** Global SHADOW_MODE turned a denial into OK. */
  globalShadow: boolean;
  /** Denied from the over-limit cache, without a store call; `rules` holds the remembered ones. */
  overLimitCache?: boolean;
  /** One per descriptor that landed on a limited rule (not unlimited, not replaced). */
  rules: RuleOutcome[];
}

export interface RuleOutcome {
  domain: string;
  /**
   * The reference's stats key below the domain, one part per level (`key` or `key_value`); parts
   * that carry a request's value (detailed_metric, value_to_metric) are flagged by `detailed`.
   */
  metricKey: readonly string[];
  /** The key holds values from the request, so its series must be capped. */
  detailed: boolean;
  /** The descriptor's cost. */
  hits: number;
  /** The counter could not take the cost. */
  over: boolean;
  /** Within the limit, but at or above the near-limit ratio after this decision. */
  near: boolean;
  /** Over, but a shadow-mode rule (or global shadow mode) let it through. */
  shadowed: boolean;
  /**
   * is_negative_hits: `hits` were given back. Counted as `total_negative_hits` alone, never as
   * total, within, near or over.
   */
  givenBack: boolean;
  /** COMPAT_MODE=reference: the hits split as the reference's statistics split them. */
  counts?: RuleCounts;
}

/** How many of a descriptor's hits each statistic counts (see referenceCounts). */
export interface RuleCounts {
  over: number;
  near: number;
  within: number;
  shadow: number;
  /** Over, answered from the local cache: `over_limit_with_local_cache`. */
  localCache: number;
}

const split: RuleCounts = { over: 0, near: 0, within: 0, shadow: 0, localCache: 0 };

/**
 * The hits of a rule outcome as each statistic counts them, in either mode. For tollgate's own
 * split the result is one object reused by every call, so that the hot path allocates nothing:
 * read it before the next call.
 */
export function splitHits(rule: RuleOutcome): Readonly<RuleCounts> {
  if (rule.counts !== undefined) return rule.counts;
  const hits = rule.hits;
  split.over = rule.over ? hits : 0;
  split.near = !rule.over && rule.near ? hits : 0;
  split.within = rule.over ? 0 : hits;
  split.shadow = rule.shadowed ? hits : 0;
  return split;
}
