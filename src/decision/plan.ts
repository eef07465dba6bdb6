import type { Check, Descriptor, DescriptorStatus, Entry } from '../core/check.js';
import { counterEntries, counterKey, referenceKey, referenceWindowKey } from '../store/keys.js';
import { costOf, overrideLimit } from './limits.js';
import { matchRule } from '../rules/match.js';
import { calendarWindowId } from '../rules/calendar.js';
import type { Algorithm, Limit, RuleNode, RuleSet } from '../rules/types.js';
import type { CounterCheck } from '../store/Store.js';
import type { CountingPolicy } from './counting.js';
import type { QuotaPolicy } from './quota.js';

/**
 * The first step of a decision: from a check and the rules in force, the counters to ask the
 * store for, each descriptor with its limit, cost and role (enforced, shadow, quota). A pure
 * function: no I/O, no clock, no cache. It throws InvalidRequestError for an override the rules
 * cannot take.
 */
export interface Plan {
  check: Check;
  /** The check's domain has no rules: nothing is counted, every descriptor is OK. */
  unknownDomain: boolean;
  /** The rule each descriptor matched, in request order. */
  nodes: readonly (RuleNode | undefined)[];
  /**
   * The statuses the rules settle alone (unlimited, no limit, replaced), in request order; the
   * counted descriptors' places are empty.
   */
  settled: readonly (DescriptorStatus | undefined)[];
  counted: readonly PlannedDescriptor[];
  /** What the store decides. A cache in front of the store may mark them (`reference`). */
  counters: CounterCheck[];
}

/** A descriptor that landed on a counter. */
export interface PlannedDescriptor {
  index: number;
  limit: Limit;
  /** The rule it matched; undefined when the caller's override set its limit. */
  node: RuleNode | undefined;
  /** Its counter's place in `counters`. */
  slot: number;
  cost: number;
  /** A shadow rule's: decided and counted, always answered OK. */
  shadow: boolean;
  quota: boolean;
  /** is_negative_hits: its cost is given back; answered OK with what is left after it. */
  giveBack: boolean;
}

export interface PlanPolicy {
  keyPrefix: string;
  /** COMPAT_KEYS=reference: the reference's key of each descriptor and window (keys.ts). */
  referenceKeys?: boolean;
  defaultAlgorithm: Algorithm;
  counting: CountingPolicy;
  quota: QuotaPolicy;
}

export const NO_LIMIT: DescriptorStatus = Object.freeze({ code: 'OK', limitRemaining: 0 });
const UNLIMITED: DescriptorStatus = Object.freeze({ code: 'OK', limitRemaining: 4_294_967_295 });

/**
 * `matched`: the rule each descriptor matches, when the caller has walked the rules already (an
 * RLQS bucket's path, rlqs/buckets.ts); else each descriptor is matched here. `nowMs`: the
 * decision's time, which COMPAT_KEYS=reference's keys name the window of (this process's clock
 * when absent); tollgate's own keys do not depend on it.
 */
export function planCheck(
  check: Check,
  ruleSet: RuleSet,
  policy: PlanPolicy,
  matched?: readonly (RuleNode | undefined)[],
  nowMs?: number,
): Plan {
  const descriptors = check.descriptors;
  const settled = new Array<DescriptorStatus | undefined>(descriptors.length);
  const domain = ruleSet.domains.get(check.domain);
  if (domain === undefined) {
    settled.fill(NO_LIMIT);
    return { check, unknownDomain: true, nodes: [], settled, counted: [], counters: [] };
  }
  const { counting, quota: quotaPolicy } = policy;
  const nodes = matched ?? descriptors.map((descriptor) => matchRule(domain, descriptor.entries));
  const replaced = replacedNames(descriptors, nodes);
  const counters: CounterCheck[] = [];
  const counted: PlannedDescriptor[] = [];
  let unjudged = false;
  for (let index = 0; index < descriptors.length; index++) {
    const descriptor = descriptors[index] as Descriptor;
    const node = nodes[index];
    const override = descriptor.limit;
    if (override === undefined && node?.unlimited) {
      settled[index] = UNLIMITED;
      continue;
    }
    const limit = override
      ? overrideLimit(override, node?.limit, policy.defaultAlgorithm, index)
      : node?.limit;
    // A replaced limit is neither checked nor consumed.
    if (limit === undefined || (!override && replaced?.has(limit.name))) {
      settled[index] = NO_LIMIT;
      unjudged = true;
      continue;
    }
    const giveBack = descriptor.isNegativeHits === true;
    // A caller's override is always enforced, as in the reference. A give-back is neither shadow
    // nor quota: it gives back to the counter whatever role its rule has, and decides nothing.
    const shadow = !giveBack && !override && node?.shadowMode === true;
    const quota = !giveBack && quotaPolicy.isQuota(node, override !== undefined, shadow);
    unjudged ||= shadow;
    const cost = costOf(descriptor, check.hitsAddend);
    const entries =
      override || node === undefined
        ? descriptor.entries
        : counterEntries(descriptor.entries, node);
    const key = keyOfCounter(policy, check.domain, entries, domain.tenantKey, limit, nowMs);
    const slot = giveBack
      ? counting.addGiveBack(counters, key, limit, cost)
      : counting.add(counters, key, limit, cost, shadow, quota);
    counted.push({
      index,
      limit,
      node: override ? undefined : node,
      slot,
      cost,
      shadow,
      quota,
      giveBack,
    });
  }
  // A descriptor already passes: the request is allowed, and each counter is consumed when it
  // fits, which the store does for a counter outside the gate. The descriptors still report
  // their own quota verdicts.
  if (unjudged && quotaPolicy.unjudgedPasses) for (const counter of counters) counter.shadow = true;
  return { check, unknownDomain: false, nodes, settled, counted, counters };
}

/**
 * The store key of a descriptor's counter under `limit`: tollgate's own (keys.ts's counterKey), or
 * under COMPAT_KEYS=reference the reference's, in the window holding `nowMs` (this process's clock
 * when absent). The CLI's `counters` names counters by it too.
 */
export function keyOfCounter(
  policy: Pick<PlanPolicy, 'keyPrefix' | 'referenceKeys'>,
  domain: string,
  entries: readonly Entry[],
  tenantKey: string | undefined,
  limit: Limit,
  nowMs: number | undefined,
): string {
  if (policy.referenceKeys) {
    const key = referenceKey(policy.keyPrefix, domain, entries);
    return referenceWindowKey(key, limit.windowMs, nowMs ?? Date.now());
  }
  return counterKey(
    policy.keyPrefix,
    domain,
    entries,
    tenantKey,
    limit.algorithm,
    limit.calendar ? calendarWindowId(limit.calendar) : limit.windowMs,
  );
}

/** The names that the request's matched limits replace; undefined when none does. */
function replacedNames(
  descriptors: readonly Descriptor[],
  nodes: readonly (RuleNode | undefined)[],
): Set<string> | undefined {
  let names: Set<string> | undefined;
  for (let i = 0; i < nodes.length; i++) {
    const node = nodes[i];
    if (node === undefined || descriptors[i]?.limit !== undefined) continue;
    for (const name of node.replaces) (names ??= new Set()).add(name);
  }
  return names;
}
