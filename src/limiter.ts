import type { Check, CurrentLimit, Decision, Descriptor, DescriptorStatus } from './check.js';
import { StoreError } from './errors.js';
import {
  referenceHeaders,
  responseHeaders,
  type HeaderCandidate,
  type ReferenceHeaderNames,
} from './headers.js';
import { costOf, describeLimit, overrideLimit } from './limits.js';
import { counterEntries, counterKey } from './keys.js';
import type { CheckObserver, RuleOutcome } from './outcome.js';
import {
  createKeyCache,
  createOverLimitCache,
  type KeyCache,
  type LocalCacheStats,
  type OverLimitCache,
} from './overLimitCache.js';
import { referenceCounts } from './referenceCounts.js';
import { matchRule } from './rules/match.js';
import { entriesMetricKey, metricKeyOf } from './rules/metricKey.js';
import type { Algorithm, JsonValue, Limit, RuleNode, RuleSet } from './rules/types.js';
import type { FailureMode } from './settings.js';
import {
  COST_CAP,
  NEVER,
  type CounterCheck,
  type Store,
  type StoreDecision,
} from './store/Store.js';

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
   * ReferenceCounting), with `stop` for its STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT. The over-limit
   * cache then works as the reference's local cache: a counter remembered over is answered from
   * memory and not incremented, whatever the others of the request do.
   */
  referenceCounting?: { stop: boolean };
  /**
   * COMPAT_MODE=reference: `duration_until_reset` in whole seconds, rounded up, as the reference
   * answers `W − (now_s mod W)`; tollgate's own default is the exact milliseconds.
   */
  wholeSecondResets?: boolean;
  /** OVER_LIMIT_CACHE_SIZE: denied counters answered from memory until their reset; 0: off. */
  overLimitCacheSize?: number;
  /**
   * The clock the store's resets are counted on, read before each store call: `clock` by default,
   * else a monotonic one (CLOCK=redis: Redis TIME runs at the same rate). Give the in-memory
   * store's clock when it has its own.
   */
  cacheClock?: () => number;
  observe?: CheckObserver;
}

export interface Limiter {
  decide(check: Check): Promise<Decision>;
  /** The reference's local cache's counts, when it is on (COMPAT_MODE=reference). */
  localCacheStats?(): LocalCacheStats;
}

const NO_LIMIT: DescriptorStatus = Object.freeze({ code: 'OK', limitRemaining: 0 });
const UNLIMITED: DescriptorStatus = Object.freeze({ code: 'OK', limitRemaining: 4_294_967_295 });

/** One descriptor that landed on a counter. */
interface Counted {
  index: number;
  limit: Limit;
  node: RuleNode | undefined;
  slot: number;
  cost: number;
  shadow: boolean;
  quota: boolean;
}

export function createLimiter(options: LimiterOptions): Limiter {
  const { store, clock, defaultAlgorithm, keyPrefix, observe } = options;
  const reported = new WeakMap<Limit, CurrentLimit>();
  const nearRatio = options.nearLimitRatio ?? 0.8;
  const cacheSize = options.overLimitCacheSize ?? 0;
  const referenceCounting = options.referenceCounting;
  const cache =
    cacheSize > 0 && referenceCounting === undefined ? createOverLimitCache(cacheSize) : undefined;
  const keyCache =
    cacheSize > 0 && referenceCounting !== undefined ? createKeyCache(cacheSize) : undefined;
  const cacheClock = options.cacheClock ?? clock ?? (() => performance.now());
  // Under COMPAT_MODE=reference, the reference's own headers pick their descriptor its way.
  const pickedReferenceHeaders = referenceCounting ? options.referenceHeaders : undefined;
  const headerKinds = {
    ietf: options.ietfHeaders ?? true,
    reference: referenceCounting ? undefined : options.referenceHeaders,
  };

  function currentLimit(limit: Limit): CurrentLimit {
    let current = reported.get(limit);
    if (current === undefined) {
      current = describeLimit(limit);
      reported.set(limit, current);
    }
    return current;
  }

  return {
    ...(keyCache ? { localCacheStats: () => keyCache.stats() } : {}),
    async decide(check: Check): Promise<Decision> {
      const descriptors = check.descriptors;
      const statuses = new Array<DescriptorStatus>(descriptors.length);
      const ruleSet = options.rules();
      cache?.sync(ruleSet);
      keyCache?.sync(ruleSet);
      const domain = ruleSet.domains.get(check.domain);
      if (domain === undefined) {
        statuses.fill(NO_LIMIT);
        const decision: Decision = { code: 'OK', statuses };
        if (options.dynamicMetadata) {
          decision.dynamicMetadata = dynamicMetadata(check, [], statuses);
        }
        observe?.(event(check, decision, { unknownDomain: true }));
        return decision;
      }

      const nodes = descriptors.map((descriptor) => matchRule(domain, descriptor.entries));
      const replaced = replacedNames(descriptors, nodes);
      const counters: CounterCheck[] = [];
      const counted: Counted[] = [];
      const globalQuota = options.quotaMode === true;
      /** Under QUOTA_MODE: a descriptor that passes without its counter being judged. */
      let quotaPasses = false;
      for (let index = 0; index < descriptors.length; index++) {
        const descriptor = descriptors[index] as Descriptor;
        const node = nodes[index];
        const override = descriptor.limit;
        if (override === undefined && node?.unlimited) {
          statuses[index] = UNLIMITED;
          continue;
        }
        const limit = override
          ? overrideLimit(override, node?.limit, defaultAlgorithm, index)
          : node?.limit;
        // A replaced limit is neither checked nor consumed.
        if (limit === undefined || (!override && replaced?.has(limit.name))) {
          statuses[index] = NO_LIMIT;
          quotaPasses ||= globalQuota;
          continue;
        }
        // A caller's override is always enforced, as in the reference, but for QUOTA_MODE.
        const shadow = !override && node?.shadowMode === true;
        const quota = !shadow && (globalQuota || (!override && node?.quotaMode === true));
        quotaPasses ||= globalQuota && shadow;
        const cost = costOf(descriptor, check.hitsAddend);
        const key = counterKey(
          keyPrefix,
          check.domain,
          override || node === undefined
            ? descriptor.entries
            : counterEntries(descriptor.entries, node),
          domain.tenantKey,
          limit.algorithm,
          limit.windowMs,
        );
        const slot =
          referenceCounting !== undefined && limit.algorithm === 'fixed_window'
            ? counters.push({
                ...newCounter(key, limit, cost, shadow, quota),
                reference: { stop: referenceCounting.stop, held: false, cached: false },
              }) - 1
            : addCounter(counters, key, limit, cost, shadow, quota);
        counted.push({
          index,
          limit,
          node: override ? undefined : node,
          slot,
          cost,
          shadow,
          quota,
        });
      }
      // Every counter is a quota counter, and one descriptor already passes: the request is
      // allowed, and each counter is consumed when it fits, which the store does for a counter
      // outside the gate. The descriptors still report their own quota verdicts.
      if (quotaPasses) for (const counter of counters) counter.shadow = true;
      if (counters.length === 0) {
        const decision = finish(check, nodes, statuses, 'OK', []);
        observe?.(event(check, decision, {}));
        return decision;
      }

      // Read before the store call: the reset it returns runs from a later moment.
      const cacheNow = cache === undefined && keyCache === undefined ? 0 : cacheClock();
      if (cache !== undefined && cache.size > 0) {
        const deadlines = cachedDenial(cache, counters, cacheNow);
        if (deadlines !== undefined)
          return answerFromCache(check, nodes, statuses, counted, counters, deadlines, cacheNow);
      }
      // The reference's local cache: each remembered counter is answered from memory; the store
      // is called only when some counter is not remembered.
      // Every counter is looked up, as the reference looks each key up: its gauges count misses.
      const remembered = keyCache ? rememberedOver(keyCache, counters, cacheNow) : undefined;
      if (remembered !== undefined && remembered.every((deadline) => deadline !== undefined)) {
        return answerFromCache(
          check,
          nodes,
          statuses,
          counted,
          counters,
          remembered as number[],
          cacheNow,
        );
      }

      let outcome: StoreDecision;
      const started = observe ? performance.now() : 0;
      try {
        outcome = await store.decide(counters, clock?.());
      } catch (error) {
        if (!(error instanceof StoreError)) throw error;
        const storeMs = observe ? performance.now() - started : 0;
        if (options.failureMode === 'error') {
          observe?.(event(check, undefined, { storeError: error, storeMs }));
          throw error;
        }
        const decision = failureDecision(options.failureMode, statuses, counted, currentLimit);
        observe?.(event(check, decision, { storeError: error, storeMs }));
        return decision;
      }
      const storeMs = observe ? performance.now() - started : 0;
      if (cache !== undefined) {
        for (let slot = 0; slot < counters.length; slot++) {
          const result = outcome.results[slot];
          if (result !== undefined)
            cache.learn(ruleSet, counters[slot] as CounterCheck, result, cacheNow);
        }
      }
      if (keyCache !== undefined) {
        for (let slot = 0; slot < counters.length; slot++) {
          const counter = counters[slot] as CounterCheck;
          const result = outcome.results[slot];
          // As the reference: any counter found over, shadow and quota ones included.
          if (counter.reference && !counter.reference.cached && result && !result.fits)
            keyCache.remember(counter.key, cacheNow + result.resetMs);
        }
      }

      const candidates: HeaderCandidate[] = [];
      // undefined: no quota descriptor is over, or one fits; null: all are over, and never free.
      let quotaRetryMs: number | null | undefined;
      let quotaFits = false;
      const rules: RuleOutcome[] = [];
      for (const { index, limit, node, slot, cost, shadow, quota } of counted) {
        const result = outcome.results[slot];
        if (result === undefined) throw new Error('store returned fewer results than counters');
        const over = !result.fits;
        const reference = (counters[slot] as CounterCheck).reference;
        // A reference counter's result carries its count; one remembered over has 0 left.
        let remaining = result.remaining;
        let resetMs = result.resetMs;
        if (reference?.cached) {
          remaining = 0;
          resetMs = Math.ceil((remembered?.[slot] as number) - cacheNow);
        } else if (reference) {
          remaining = Math.max(0, limit.requestsPerUnit - result.remaining);
        }
        const status: DescriptorStatus = {
          // A shadow rule always reports OK; a quota descriptor says whether its own quota is over.
          code: shadow || !over ? 'OK' : 'OVER_LIMIT',
          currentLimit: currentLimit(limit),
          limitRemaining: remaining,
        };
        if (resetMs !== NEVER) status.durationUntilResetMs = resetMs;
        statuses[index] = status;
        // The headers describe enforced limits only.
        if (!shadow && !quota) candidates.push({ limit, status });
        if (quota && !over) quotaFits = true;
        if (quota && over) {
          const reset = status.durationUntilResetMs;
          quotaRetryMs =
            reset === undefined ? (quotaRetryMs ?? null) : Math.min(reset, quotaRetryMs ?? reset);
        }
        if (observe) {
          const capacity = limit.algorithm === 'token_bucket' ? limit.burst : limit.requestsPerUnit;
          const near = !over && result.remaining <= capacity * (1 - nearRatio);
          const outcome = ruleOutcome(check, index, node, cost, over, near, over && shadow);
          if (reference) {
            outcome.counts = referenceCounts(
              limit.requestsPerUnit,
              reference.cached ? undefined : result.remaining,
              cost,
              nearRatio,
              shadow,
            );
          }
          rules.push(outcome);
        }
      }

      const denied = !outcome.allowed;
      const globalShadow = denied && options.shadowMode === true;
      const code = denied && !globalShadow ? 'OVER_LIMIT' : 'OK';
      const headers = responseHeaders(
        candidates,
        code === 'OVER_LIMIT',
        headerKinds,
        quotaFits ? undefined : quotaRetryMs,
      );
      const decision = finish(check, nodes, statuses, code, headers, counted);
      observe?.(event(check, decision, { storeMs, globalShadow, rules }));
      return decision;
    },
  };

  /**
   * OVER_LIMIT without a store call, when every counter is remembered over (see cachedDenial):
   * nothing is consumed, as the store's all-or-nothing denial would do, and each descriptor says
   * what the store would: OVER_LIMIT (OK for a shadow one sharing the counter) with 0 remaining
   * and the time to its deadline.
   */
  function answerFromCache(
    check: Check,
    nodes: (RuleNode | undefined)[],
    statuses: DescriptorStatus[],
    counted: readonly Counted[],
    counters: readonly CounterCheck[],
    deadlines: readonly number[],
    now: number,
  ): Decision {
    const candidates: HeaderCandidate[] = [];
    const rules: RuleOutcome[] = [];
    for (const { index, limit, node, slot, cost, shadow, quota } of counted) {
      const status: DescriptorStatus = {
        code: shadow ? 'OK' : 'OVER_LIMIT',
        currentLimit: currentLimit(limit),
        limitRemaining: 0,
        durationUntilResetMs: Math.ceil((deadlines[slot] as number) - now),
      };
      statuses[index] = status;
      if (!shadow && !quota) candidates.push({ limit, status });
      if (observe) {
        const outcome = ruleOutcome(check, index, node, cost, true, false, shadow);
        if (referenceCounting !== undefined) {
          outcome.counts = referenceCounts(limit.requestsPerUnit, undefined, cost, 0, shadow);
        }
        rules.push(outcome);
      }
    }
    // Every counter is over: the request is denied unless each one stands outside the gate.
    const denied = counters.some((counter) => !counter.shadow);
    const globalShadow = denied && options.shadowMode === true;
    const code = denied && !globalShadow ? 'OVER_LIMIT' : 'OK';
    const headers = responseHeaders(candidates, code === 'OVER_LIMIT', headerKinds);
    const decision = finish(check, nodes, statuses, code, headers, counted);
    observe?.(event(check, decision, { globalShadow, rules, overLimitCache: true }));
    return decision;
  }

  function finish(
    check: Check,
    nodes: readonly (RuleNode | undefined)[],
    statuses: DescriptorStatus[],
    code: Decision['code'],
    headers: Decision['headers'],
    counted: readonly Counted[] = [],
  ): Decision {
    const decision: Decision = { code, statuses };
    if (options.wholeSecondResets) roundResetsToSeconds(statuses);
    if (pickedReferenceHeaders !== undefined && counted.length > 0) {
      const byIndex = new Map(counted.map((c) => [c.index, c]));
      headers = (headers ?? []).concat(
        referenceHeaders(
          statuses,
          (i) => byIndex.get(i)?.quota === false,
          pickedReferenceHeaders,
          (i) => byIndex.get(i)?.limit.windowMs ?? 0,
        ),
      );
    }
    if (headers !== undefined && headers.length > 0) decision.headers = headers;
    if (options.dynamicMetadata) decision.dynamicMetadata = dynamicMetadata(check, nodes, statuses);
    return decision;
  }
}

/**
 * The slots' deadlines when every counter of the request is remembered as denied a single unit,
 * so that each descriptor's true status is known without the store: OVER_LIMIT with 0 remaining
 * (one unit does not fit) until its deadline. Undefined when any counter must be decided: one
 * not remembered, a cost above 1 (its remaining and its reset may differ), or a shadow, quota or
 * overdraw counter, which the store consumes or judges with the others.
 */
function cachedDenial(
  cache: OverLimitCache,
  counters: readonly CounterCheck[],
  now: number,
): number[] | undefined {
  const deadlines: number[] = [];
  for (const counter of counters) {
    if (counter.shadow || counter.overdraw || counter.quota || counter.cost > 1) return undefined;
    const deadline = cache.deniedUntil(counter, now);
    if (deadline === undefined) return undefined;
    deadlines.push(deadline);
  }
  return deadlines;
}

function ruleOutcome(
  check: Check,
  index: number,
  node: RuleNode | undefined,
  hits: number,
  over: boolean,
  near: boolean,
  shadowed: boolean,
): RuleOutcome {
  const entries = (check.descriptors[index] as Descriptor).entries;
  const key = node
    ? metricKeyOf(node, entries)
    : { parts: entriesMetricKey(entries), detailed: true };
  return {
    domain: check.domain,
    metricKey: key.parts,
    detailed: key.detailed,
    hits,
    over,
    near,
    shadowed,
  };
}

function event(
  check: Check,
  decision: Decision | undefined,
  fields: Partial<Parameters<CheckObserver>[0]>,
): Parameters<CheckObserver>[0] {
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

/** Adds the descriptor to its counter, or to a new one; returns the counter's slot. */
function addCounter(
  counters: CounterCheck[],
  key: string,
  limit: Limit,
  cost: number,
  shadow: boolean,
  quota: boolean,
): number {
  let slot = 0;
  while (slot < counters.length && (counters[slot] as CounterCheck).key !== key) slot++;
  const counter = counters[slot];
  if (counter === undefined) {
    counters.push(newCounter(key, limit, cost, shadow, quota));
    return slot;
  }
  // Descriptors on one counter add up their costs; differing limits take the strictest, and an
  // enforced descriptor makes the counter enforced.
  counter.cost = Math.min(COST_CAP, counter.cost + cost);
  counter.limit = Math.min(counter.limit, limit.requestsPerUnit);
  counter.burst = Math.min(counter.burst, limit.burst);
  counter.shadow &&= shadow;
  counter.quota &&= quota;
  counter.overdraw ||= limit.overdraw;
  return slot;
}

function newCounter(
  key: string,
  limit: Limit,
  cost: number,
  shadow: boolean,
  quota: boolean,
): CounterCheck {
  return {
    key,
    algorithm: limit.algorithm,
    windowMs: limit.windowMs,
    limit: limit.requestsPerUnit,
    burst: limit.burst,
    cost,
    shadow,
    quota,
    overdraw: limit.overdraw,
  };
}

/**
 * Under the reference's local cache: each reference counter's deadline while it is remembered
 * over (undefined for the others), with the counters marked as the store must see them. When
 * some are remembered, STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT increments none of the others.
 * Undefined when none is remembered.
 */
function rememberedOver(
  keyCache: KeyCache,
  counters: readonly CounterCheck[],
  now: number,
): (number | undefined)[] | undefined {
  let found = false;
  const deadlines = counters.map((counter) => {
    const deadline = counter.reference ? keyCache.until(counter.key, now) : undefined;
    if (deadline !== undefined && counter.reference) {
      counter.reference.cached = true;
      found = true;
    }
    return deadline;
  });
  if (!found) return undefined;
  for (const counter of counters) if (counter.reference?.stop) counter.reference.held = true;
  return deadlines;
}

/**
 * RESPONSE_DYNAMIC_METADATA, in the shape of the reference's main: the domain; each descriptor's
 * entries as `key=value`, with its limit override and its own cost when it has them; the request's
 * cost when it is not 0; and `metadata`, the rules' `metadata` of the descriptors that passed with
 * a rule's limit, merged deeply in request order, the first value of a key winning.
 */
function dynamicMetadata(
  check: Check,
  nodes: readonly (RuleNode | undefined)[],
  statuses: readonly DescriptorStatus[],
): Record<string, JsonValue> {
  const fields: Record<string, JsonValue> = {
    domain: check.domain,
    descriptors: check.descriptors.map(describeDescriptor),
  };
  if (check.hitsAddend !== 0) fields.hitsAddend = check.hitsAddend;
  let merged: Record<string, JsonValue> | undefined;
  check.descriptors.forEach((descriptor, i) => {
    const status = statuses[i];
    const metadata = nodes[i]?.metadata;
    // Passed with a rule's limit: not over, not unlimited or replaced, no override.
    const passed = status?.code === 'OK' && status.currentLimit !== undefined;
    if (!passed || descriptor.limit !== undefined || metadata === undefined) return;
    merged = mergeFirstWins(merged ?? {}, metadata);
  });
  if (merged !== undefined && Object.keys(merged).length > 0) fields.metadata = merged;
  return fields;
}

const OVERRIDE_UNITS: Readonly<Record<string, string>> = {
  second: 'SECOND',
  minute: 'MINUTE',
  hour: 'HOUR',
  day: 'DAY',
  month: 'MONTH',
  year: 'YEAR',
};

function describeDescriptor(descriptor: Descriptor): JsonValue {
  const fields: Record<string, JsonValue> = {
    entries: descriptor.entries.map(({ key, value }) => `${key}=${value}`),
  };
  // The override in protobuf's text form, as the reference prints it.
  if (descriptor.limit !== undefined) {
    const { requestsPerUnit, unit } = descriptor.limit;
    fields.limit = `requests_per_unit:${requestsPerUnit} unit:${OVERRIDE_UNITS[unit]}`;
  }
  if (descriptor.hitsAddend !== undefined) fields.hitsAddend = Number(descriptor.hitsAddend);
  return fields;
}

/** `into` with each key of `from` it lacks; maps under a key both have are merged the same way. */
function mergeFirstWins(
  into: Record<string, JsonValue>,
  from: Readonly<Record<string, JsonValue>>,
): Record<string, JsonValue> {
  const merged = { ...into };
  for (const [key, value] of Object.entries(from)) {
    const present = Object.hasOwn(merged, key) ? merged[key] : undefined;
    if (present === undefined) define(merged, key, value);
    else if (isMap(present) && isMap(value)) define(merged, key, mergeFirstWins(present, value));
  }
  return merged;
}

/** As an own property, so that a key such as `__proto__` stays a plain key. */
function define(object: Record<string, JsonValue>, key: string, value: JsonValue): void {
  Object.defineProperty(object, key, {
    value,
    enumerable: true,
    writable: true,
    configurable: true,
  });
}

const isMap = (value: JsonValue): value is Record<string, JsonValue> =>
  typeof value === 'object' && value !== null && !Array.isArray(value);

function failureDecision(
  mode: 'allow' | 'deny',
  statuses: DescriptorStatus[],
  counted: readonly Counted[],
  currentLimit: (limit: Limit) => CurrentLimit,
): Decision {
  for (const { index, limit } of counted) {
    statuses[index] =
      mode === 'deny'
        ? { code: 'OVER_LIMIT', currentLimit: currentLimit(limit), limitRemaining: 0 }
        : NO_LIMIT;
  }
  return { code: mode === 'deny' ? 'OVER_LIMIT' : 'OK', statuses };
}

/** Each reset up to the next whole second: ceil(W − e) in seconds is the reference's W − ⌊e⌋. */
function roundResetsToSeconds(statuses: DescriptorStatus[]): void {
  for (const status of statuses) {
    const ms = status?.durationUntilResetMs;
    if (ms !== undefined) status.durationUntilResetMs = Math.ceil(ms / 1000) * 1000;
  }
}
