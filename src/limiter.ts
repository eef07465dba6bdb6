import type {
  Check,
  CurrentLimit,
  Decision,
  Descriptor,
  DescriptorStatus,
  LimitOverride,
} from './check.js';
import { formatDuration } from './duration.js';
import { InvalidRequestError, StoreError } from './errors.js';
import { counterKey } from './keys.js';
import { checkTokenBucketExact } from './rules/tokenBucket.js';
import { matchRule } from './rules/match.js';
import { UNIT_SECONDS, type Algorithm, type Limit, type RuleSet } from './rules/types.js';
import type { FailureMode } from './settings.js';
import { COST_CAP, NEVER, type CounterCheck, type Store } from './store/Store.js';

/**
 * The core: matches a check's descriptors to rules, maps them onto counters and lets the store
 * decide them all at once. Knows nothing of gRPC.
 */
export interface LimiterOptions {
  /** The rules in force; read once per check, so a reload swaps them whole. */
  rules: () => RuleSet;
  store: Store;
  /** CLOCK=local: the service's clock. Undefined: the store reads its own (Redis TIME). */
  clock: (() => number) | undefined;
  defaultAlgorithm: Algorithm;
  keyPrefix: string;
  failureMode: FailureMode;
  onStoreError?: (error: StoreError) => void;
}

export interface Limiter {
  decide(check: Check): Promise<Decision>;
}

const NO_LIMIT: DescriptorStatus = Object.freeze({ code: 'OK', limitRemaining: 0 });
const UNLIMITED: DescriptorStatus = Object.freeze({ code: 'OK', limitRemaining: 4_294_967_295 });
const BIG_COST_CAP = BigInt(COST_CAP);

export function createLimiter(options: LimiterOptions): Limiter {
  const { store, clock, defaultAlgorithm, keyPrefix } = options;
  const reported = new WeakMap<Limit, CurrentLimit>();

  function currentLimit(limit: Limit): CurrentLimit {
    let current = reported.get(limit);
    if (current === undefined) {
      current = describeLimit(limit);
      reported.set(limit, current);
    }
    return current;
  }

  return {
    async decide(check: Check): Promise<Decision> {
      const descriptors = check.descriptors;
      const statuses = new Array<DescriptorStatus>(descriptors.length);
      const domain = options.rules().domains.get(check.domain);
      if (domain === undefined) {
        statuses.fill(NO_LIMIT);
        return { code: 'OK', statuses };
      }

      const counters: CounterCheck[] = [];
      const limits = new Array<Limit | undefined>(descriptors.length);
      const slots = new Array<number>(descriptors.length);
      for (let i = 0; i < descriptors.length; i++) {
        const descriptor = descriptors[i] as Descriptor;
        const node = matchRule(domain, descriptor.entries);
        let limit = node?.limit;
        if (descriptor.limit !== undefined) {
          limit = overrideLimit(descriptor.limit, limit, defaultAlgorithm, i);
        } else if (node?.unlimited) {
          statuses[i] = UNLIMITED;
          continue;
        }
        if (limit === undefined) {
          statuses[i] = NO_LIMIT;
          continue;
        }
        const cost = costOf(descriptor, check.hitsAddend);
        const key = counterKey(
          keyPrefix,
          check.domain,
          descriptor.entries,
          domain.tenantKey,
          limit.algorithm,
          limit.windowMs,
        );
        let slot = 0;
        while (slot < counters.length && (counters[slot] as CounterCheck).key !== key) slot++;
        if (slot === counters.length) {
          counters.push({
            key,
            algorithm: limit.algorithm,
            windowMs: limit.windowMs,
            limit: limit.requestsPerUnit,
            burst: limit.burst,
            cost,
          });
        } else {
          // Descriptors on one counter add up their costs; differing limits take the strictest.
          const counter = counters[slot] as CounterCheck;
          counter.cost = Math.min(COST_CAP, counter.cost + cost);
          counter.limit = Math.min(counter.limit, limit.requestsPerUnit);
          counter.burst = Math.min(counter.burst, limit.burst);
        }
        limits[i] = limit;
        slots[i] = slot;
      }
      if (counters.length === 0) return { code: 'OK', statuses };

      let outcome;
      try {
        outcome = await store.decide(counters, clock?.());
      } catch (error) {
        if (!(error instanceof StoreError)) throw error;
        options.onStoreError?.(error);
        return failureDecision(options.failureMode, error, statuses, limits, currentLimit);
      }

      for (let i = 0; i < descriptors.length; i++) {
        const limit = limits[i];
        if (limit === undefined) continue;
        const result = outcome.results[slots[i] as number];
        if (result === undefined) throw new Error('store returned fewer results than counters');
        const status: DescriptorStatus = {
          code: outcome.allowed || result.fits ? 'OK' : 'OVER_LIMIT',
          currentLimit: currentLimit(limit),
          limitRemaining: result.remaining,
        };
        if (result.resetMs !== NEVER) status.durationUntilResetMs = result.resetMs;
        statuses[i] = status;
      }
      return { code: outcome.allowed ? 'OK' : 'OVER_LIMIT', statuses };
    },
  };
}

/** The descriptor's own cost wins over the request's; the request's 0 means 1. */
function costOf(descriptor: Descriptor, requestHits: number): number {
  const own = descriptor.hitsAddend;
  if (own === undefined) return requestHits === 0 ? 1 : requestHits;
  // Anything above every possible limit is the same to the store: it can never fit.
  return own >= BIG_COST_CAP ? COST_CAP : Number(own);
}

function overrideLimit(
  override: LimitOverride,
  rule: Limit | undefined,
  defaultAlgorithm: Algorithm,
  index: number,
): Limit {
  const windowMs = UNIT_SECONDS[override.unit] * 1000;
  const algorithm = rule?.algorithm ?? defaultAlgorithm;
  const limit = override.requestsPerUnit;
  if (algorithm === 'token_bucket') {
    const reason = checkTokenBucketExact(limit, windowMs, limit);
    if (reason !== undefined)
      throw new InvalidRequestError(`descriptors[${index}].limit: ${reason}`);
  }
  return {
    requestsPerUnit: limit,
    unit: override.unit,
    windowMs,
    algorithm,
    burst: limit,
    name: rule?.name ?? '',
    replaces: [],
    overdraw: false,
  };
}

function describeLimit(limit: Limit): CurrentLimit {
  if (limit.unit !== undefined) {
    return { requestsPerUnit: limit.requestsPerUnit, unit: limit.unit, name: limit.name };
  }
  // Envoy's unit enum cannot say "30 seconds": the exact window travels in the name.
  const window = `window=${formatDuration(limit.windowMs)}`;
  return {
    requestsPerUnit: limit.requestsPerUnit,
    unit: 'unknown',
    name: limit.name === '' ? window : `${limit.name}, ${window}`,
  };
}

function failureDecision(
  mode: FailureMode,
  error: StoreError,
  statuses: DescriptorStatus[],
  limits: (Limit | undefined)[],
  currentLimit: (limit: Limit) => CurrentLimit,
): Decision {
  if (mode === 'error') throw error;
  for (let i = 0; i < statuses.length; i++) {
    const limit = limits[i];
    if (limit === undefined) continue;
    statuses[i] =
      mode === 'deny'
        ? { code: 'OVER_LIMIT', currentLimit: currentLimit(limit), limitRemaining: 0 }
        : NO_LIMIT;
  }
  return { code: mode === 'deny' ? 'OVER_LIMIT' : 'OK', statuses };
}
