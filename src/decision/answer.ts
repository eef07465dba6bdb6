import type { CurrentLimit, Decision, Descriptor, DescriptorStatus } from '../core/check.js';
import type { HeaderCandidate } from './headers.js';
import { describeLimit } from './limits.js';
import type { RuleOutcome } from './outcome.js';
import { entriesMetricKey, metricKeyOf } from '../rules/metricKey.js';
import type { Limit, RuleNode } from '../rules/types.js';
import { NEVER, type CounterCheck, type StoreDecision } from '../store/Store.js';
import type { CountingPolicy } from './counting.js';
import type { HeaderPolicy } from './headerPolicy.js';
import { dynamicMetadata } from './metadata.js';
import { NO_LIMIT, type Plan } from './plan.js';

/**
 * The last step of a decision: from the plan and the store's verdicts, the statuses, the overall
 * code, the headers and the dynamic metadata, each built once. A pure function; it also gives
 * what observers are told of each rule.
 */
export interface AnswerPolicy {
  counting: CountingPolicy;
  headers: HeaderPolicy;
  /** Global SHADOW_MODE: decide as always, but answer OK. */
  shadowMode: boolean;
  /** COMPAT_MODE=reference: resets in whole seconds, rounded up, as the reference answers. */
  wholeSecondResets: boolean;
  /** RESPONSE_DYNAMIC_METADATA. */
  dynamicMetadata: boolean;
  /** `near` in outcomes: at or above this share of the limit after the decision. */
  nearRatio: number;
}

export interface Answer {
  decision: Decision;
  /** Global shadow mode turned a denial into OK. */
  globalShadow: boolean;
}

/**
 * The answer to a plan that the store decided. `outcomes`, when given, receives one RuleOutcome
 * per counted descriptor, in request order.
 */
export function answerPlan(
  plan: Plan,
  verdict: StoreDecision,
  policy: AnswerPolicy,
  outcomes: RuleOutcome[] | undefined,
): Answer {
  const statuses = plan.settled.slice() as DescriptorStatus[];
  const candidates: HeaderCandidate[] = [];
  // undefined: no quota descriptor is over, or one fits; null: all are over, and never free.
  let quotaRetryMs: number | null | undefined;
  let quotaFits = false;
  const { counting, nearRatio } = policy;
  for (const { index, limit, node, slot, cost, shadow, quota, giveBack } of plan.counted) {
    const result = verdict.results[slot];
    if (result === undefined) throw new Error('store returned fewer results than counters');
    const counter = plan.counters[slot] as CounterCheck;
    const over = !result.fits;
    const status: DescriptorStatus = {
      // A shadow rule always reports OK; a quota descriptor says whether its own quota is over.
      code: shadow || !over ? 'OK' : 'OVER_LIMIT',
      currentLimit: currentLimit(limit),
      // 4294967295 says "unlimited" on the wire: a limited rule reports one less at most.
      limitRemaining: Math.min(counting.remaining(limit, counter, result), MAX_REMAINING),
    };
    if (result.resetMs !== NEVER) status.durationUntilResetMs = result.resetMs;
    statuses[index] = status;
    if (giveBack) {
      // Always OK, and outside the headers, which describe what the request was judged by.
      outcomes?.push(ruleOutcome(plan, index, node, cost, false, false, false, true));
      continue;
    }
    // The headers describe enforced limits only.
    if (!shadow && !quota) candidates.push({ limit, status });
    if (quota && !over) quotaFits = true;
    if (quota && over) {
      const reset = status.durationUntilResetMs;
      quotaRetryMs =
        reset === undefined ? (quotaRetryMs ?? null) : Math.min(reset, quotaRetryMs ?? reset);
    }
    if (outcomes !== undefined) {
      const capacity = limit.algorithm === 'token_bucket' ? limit.burst : limit.requestsPerUnit;
      const near = !over && result.remaining <= capacity * (1 - nearRatio);
      const outcome = ruleOutcome(plan, index, node, cost, over, near, over && shadow);
      const counts = counting.counts(limit, counter, result, cost, shadow);
      if (counts !== undefined) outcome.counts = counts;
      outcomes.push(outcome);
    }
  }
  if (policy.wholeSecondResets) roundResetsToSeconds(statuses);
  const denied = !verdict.allowed;
  const globalShadow = denied && policy.shadowMode;
  const code = denied && !globalShadow ? 'OVER_LIMIT' : 'OK';
  const headers = policy.headers.headers({
    candidates,
    statuses,
    counted: plan.counted,
    denied: code === 'OVER_LIMIT',
    quotaRetryMs: quotaFits ? undefined : quotaRetryMs,
  });
  return { decision: finish(plan, statuses, code, headers, policy), globalShadow };
}

/** The answer to a plan with nothing to count: every descriptor is settled by the rules. */
export function answerSettled(plan: Plan, policy: AnswerPolicy): Decision {
  return finish(plan, plan.settled.slice() as DescriptorStatus[], 'OK', [], policy);
}

/**
 * FAILURE_MODE=allow or deny, when the store failed: every counted descriptor OK with nothing
 * said of its limit, or OVER_LIMIT with 0 remaining; no headers and no metadata.
 */
export function answerFailure(plan: Plan, mode: 'allow' | 'deny'): Decision {
  const statuses = plan.settled.slice() as DescriptorStatus[];
  for (const { index, limit } of plan.counted) {
    statuses[index] =
      mode === 'deny'
        ? { code: 'OVER_LIMIT', currentLimit: currentLimit(limit), limitRemaining: 0 }
        : NO_LIMIT;
  }
  return { code: mode === 'deny' ? 'OVER_LIMIT' : 'OK', statuses };
}

function finish(
  plan: Plan,
  statuses: DescriptorStatus[],
  code: Decision['code'],
  headers: Decision['headers'],
  policy: AnswerPolicy,
): Decision {
  const decision: Decision = { code, statuses };
  if (headers !== undefined && headers.length > 0) decision.headers = headers;
  if (policy.dynamicMetadata) {
    decision.dynamicMetadata = dynamicMetadata(plan.check, plan.nodes, statuses);
  }
  return decision;
}

/** The most a limited descriptor reports left: 2^32 - 1 means unlimited on the wire. */
export const MAX_REMAINING = 4_294_967_294;

/** A limit as the response reports it, made once per limit of the rules. */
const reported = new WeakMap<Limit, CurrentLimit>();

function currentLimit(limit: Limit): CurrentLimit {
  let current = reported.get(limit);
  if (current === undefined) {
    current = describeLimit(limit);
    reported.set(limit, current);
  }
  return current;
}

function ruleOutcome(
  plan: Plan,
  index: number,
  node: RuleNode | undefined,
  hits: number,
  over: boolean,
  near: boolean,
  shadowed: boolean,
  givenBack = false,
): RuleOutcome {
  const entries = (plan.check.descriptors[index] as Descriptor).entries;
  const key = node
    ? metricKeyOf(node, entries)
    : { parts: entriesMetricKey(entries), detailed: true };
  return {
    domain: plan.check.domain,
    metricKey: key.parts,
    detailed: key.detailed,
    hits,
    over,
    near,
    shadowed,
    givenBack,
  };
}

/** Each reset up to the next whole second: ceil(W − e) in seconds is the reference's W − ⌊e⌋. */
function roundResetsToSeconds(statuses: DescriptorStatus[]): void {
  for (const status of statuses) {
    const ms = status?.durationUntilResetMs;
    if (ms !== undefined) status.durationUntilResetMs = Math.ceil(ms / 1000) * 1000;
  }
}
