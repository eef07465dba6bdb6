import type { RuleNode } from '../rules/types.js';

/**
 * Which descriptors are quota descriptors: a request is over only when every one of them is.
 * Per rule (`quota_mode: true`), or every descriptor under the global QUOTA_MODE, as the
 * reference's main has it. Chosen once, when the limiter is made.
 */
export interface QuotaPolicy {
  /** Whether a descriptor with a limit is a quota descriptor; `override`: the caller set it. */
  isQuota(node: RuleNode | undefined, override: boolean, shadow: boolean): boolean;
  /**
   * A descriptor that passes without its counter being judged (one without a limit, or a shadow
   * one) lets the whole request pass: each counter is then consumed only where it fits.
   */
  unjudgedPasses: boolean;
}

/** A rule's `quota_mode`; a caller's override is always enforced. */
export const ruleQuota: QuotaPolicy = {
  isQuota: (node, override, shadow) => !shadow && !override && node?.quotaMode === true,
  unjudgedPasses: false,
};

/** QUOTA_MODE=true: every descriptor with a limit, shadow ones aside, is a quota descriptor. */
export const globalQuota: QuotaPolicy = {
  isQuota: (_node, _override, shadow) => !shadow,
  unjudgedPasses: true,
};
