import type { Check, Decision } from '../core/check.js';
import { StoreError } from '../core/errors.js';
import type { CheckEvent, CheckObserver, RuleOutcome } from './outcome.js';
import type { RuleSet } from '../rules/types.js';
import type { Store, StoreDecision } from '../store/Store.js';
import { answerFailure, answerPlan, answerSettled } from './answer.js';
import { planCheck, type Plan } from './plan.js';
import { choosePolicy, type ModeOptions } from './policy.js';

/**
 * A decision in three steps: plan (which counters, with which limits and roles), store (one call,
 * or a cache in front of it), answer (statuses, code, headers, metadata). Knows nothing of gRPC,
 * nor of the caches: they decorate the store.
 */
export interface LimiterOptions extends ModeOptions {
  /** The rules in force; read once per check, so a reload swaps them whole. */
  rules: () => RuleSet;
  store: Store;
  /** CLOCK=local: the service's clock. Undefined: the store reads its own (Redis TIME). */
  clock: (() => number) | undefined;
  failureMode: FailureMode;
  observe?: CheckObserver;
}

/** What a check gets when the store fails: an error, or OK or OVER_LIMIT for every limited one. */
export type FailureMode = 'error' | 'allow' | 'deny';

export interface Limiter {
  decide(check: Check): Promise<Decision>;
}

export function createLimiter(options: LimiterOptions): Limiter {
  const policy = choosePolicy(options);
  const { rules, store, clock, failureMode, observe } = options;
  return {
    async decide(check) {
      // Read once: COMPAT_KEYS=reference's keys name the window of the time the store decides at.
      const nowMs = clock?.();
      const plan = planCheck(check, rules(), policy.plan, undefined, nowMs);
      if (plan.counters.length === 0) {
        const decision = answerSettled(plan, policy.answer);
        observe?.(event(check, decision, { unknownDomain: plan.unknownDomain }));
        return decision;
      }
      const started = observe ? performance.now() : 0;
      let verdict: StoreDecision;
      try {
        verdict = await store.decide(plan.counters, nowMs);
      } catch (error) {
        return failed(plan, error, observe ? performance.now() - started : 0);
      }
      const storeMs = observe && verdict.fromCache !== true ? performance.now() - started : 0;
      return answered(plan, verdict, storeMs);
    },
  };

  function answered(plan: Plan, verdict: StoreDecision, storeMs: number): Decision {
    const rules: RuleOutcome[] | undefined = observe ? [] : undefined;
    const { decision, globalShadow } = answerPlan(plan, verdict, policy.answer, rules);
    observe?.(
      event(plan.check, decision, {
        storeMs,
        globalShadow,
        rules,
        overLimitCache: verdict.fromCache,
      }),
    );
    return decision;
  }

  function failed(plan: Plan, error: unknown, storeMs: number): Decision {
    if (!(error instanceof StoreError)) throw error;
    if (failureMode === 'error') {
      observe?.(event(plan.check, undefined, { storeError: error, storeMs }));
      throw error;
    }
    const decision = answerFailure(plan, failureMode);
    observe?.(event(plan.check, decision, { storeError: error, storeMs }));
    return decision;
  }
}

function event(
  check: Check,
  decision: Decision | undefined,
  fields: Partial<CheckEvent>,
): CheckEvent {
  // Built whole, not spread over defaults: one object a check, of one shape.
  return {
    check,
    decision,
    storeError: fields.storeError,
    storeMs: fields.storeMs ?? 0,
    unknownDomain: fields.unknownDomain ?? false,
    globalShadow: fields.globalShadow ?? false,
    overLimitCache: fields.overLimitCache,
    rules: fields.rules ?? [],
  };
}
