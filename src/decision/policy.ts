import type { ReferenceHeaderNames } from './headers.js';
import type { Algorithm } from '../rules/types.js';
import type { AnswerPolicy } from './answer.js';
import { ownCounting, referenceCounting } from './counting.js';
import { chooseHeaders } from './headerPolicy.js';
import type { PlanPolicy } from './plan.js';
import { globalQuota, ruleQuota } from './quota.js';

/**
 * The modes of a decision, chosen once from the settings, so that deciding a check never
 * branches on them: the counting (tollgate's or the reference's), the quota descriptors, the
 * header kinds, the resets' precision, shadow mode and the metadata.
 */
export interface ModeOptions {
  defaultAlgorithm: Algorithm;
  keyPrefix: string;
  /** Global SHADOW_MODE: decide as always, but answer OK. */
  shadowMode?: boolean;
  /**
   * Global QUOTA_MODE, as the reference's main has it: every descriptor is a quota descriptor, so
   * a request is OVER_LIMIT only when every one of them is over. A descriptor without a limit (or
   * a shadow one, which always says OK) is one that is not over.
   */
  quotaMode?: boolean;
  /** RESPONSE_DYNAMIC_METADATA: return matched rules' metadata. */
  dynamicMetadata?: boolean;
  /** The reference's RateLimit-Limit/-Remaining/-Reset headers, when wanted. */
  referenceHeaders?: ReferenceHeaderNames;
  /** RATELIMIT_HEADERS: the IETF RateLimit-Policy, RateLimit and Retry-After; true by default. */
  ietfHeaders?: boolean;
  /** `near` in outcomes: at or above this share of the limit after the decision. */
  nearLimitRatio?: number;
  /**
   * COMPAT_MODE=reference: fixed windows are counted as envoyproxy/ratelimit counts them (see
   * ReferenceCounting), with `stop` for its STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT, and the
   * reference's headers describe the descriptor it would pick.
   */
  referenceCounting?: { stop: boolean };
  /**
   * COMPAT_KEYS=reference: counters are keyed by the reference's own key for the descriptor
   * (store/keys.ts's referenceKey), the store adding each window's start.
   */
  referenceKeys?: boolean;
  /**
   * COMPAT_MODE=reference: `duration_until_reset` in whole seconds, rounded up, as the reference
   * answers `W − (now_s mod W)`; tollgate's own default is the exact milliseconds.
   */
  wholeSecondResets?: boolean;
}

export interface DecisionPolicy {
  plan: PlanPolicy;
  answer: AnswerPolicy;
}

export function choosePolicy(options: ModeOptions): DecisionPolicy {
  const nearRatio = options.nearLimitRatio ?? 0.8;
  const reference = options.referenceCounting;
  const counting = reference ? referenceCounting(reference.stop, nearRatio) : ownCounting;
  return {
    plan: {
      keyPrefix: options.keyPrefix,
      referenceKeys: options.referenceKeys === true,
      defaultAlgorithm: options.defaultAlgorithm,
      counting,
      quota: options.quotaMode === true ? globalQuota : ruleQuota,
    },
    answer: {
      counting,
      headers: chooseHeaders({
        ietf: options.ietfHeaders ?? true,
        reference: options.referenceHeaders,
        referencePick: reference !== undefined,
      }),
      shadowMode: options.shadowMode === true,
      wholeSecondResets: options.wholeSecondResets === true,
      dynamicMetadata: options.dynamicMetadata === true,
      nearRatio,
    },
  };
}
