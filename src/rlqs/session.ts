/**
 * One RLQS stream's logic, without gRPC: a usage report in, the bucket actions out. For each
 * bucket of the report it
 * 1. matches the bucket against the rules of the stream's domain (buckets.ts);
 * 2. charges the reported allowed requests to the same counters a classic check uses, with
 *    overdraw, since those requests were already admitted;
 * 3. records the bucket's demand (allowed plus denied per second) on each enforced counter, and
 *    reads back every consumer's (demand.ts);
 * 4. answers the token bucket of its share (assign.ts), the same strategy again (which extends
 *    the TTL) unless the rate moved by more than 10%; a blanket rule when no counter limits it;
 *    `abandon_action` when the rule it matched is gone.
 */
import { planCheck } from '../decision/plan.js';
import type { PlanPolicy } from '../decision/plan.js';
import type { RuleSet } from '../rules/types.js';
import { COST_CAP, type CounterCheck, type CounterResult, type Store } from '../store/Store.js';
import type { AdmissionWatch } from './admissions.js';
import {
  assignmentTtlMs,
  consumerBudget,
  movedEnough,
  tokenBucketFor,
  type Pool,
  type PoolShare,
  type TokenBucketStrategy,
} from './assign.js';
import { bucketCheck, bucketName, bucketPath, type Bucket } from './buckets.js';
import type { DemandStore } from './demand.js';

export type Strategy =
  | { kind: 'blanket'; rule: 'ALLOW_ALL' | 'DENY_ALL' }
  | ({ kind: 'token_bucket' } & TokenBucketStrategy);

export type BucketAction =
  | { bucket: Bucket; kind: 'assign'; strategy: Strategy; ttlMs: number }
  | { bucket: Bucket; kind: 'abandon' };

export interface BucketUsage {
  bucket: Bucket;
  /** time_elapsed, in milliseconds; undefined when Envoy left it out. */
  elapsedMs: number | undefined;
  allowed: number;
  denied: number;
}

export interface SessionOptions {
  /** The stream's own name, unique across instances (the consumer's prefix in the store). */
  streamId: string;
  rules: () => RuleSet;
  store: Store;
  demand: DemandStore;
  plan: PlanPolicy;
  /** CLOCK=local: the service's clock; undefined: the store's own. */
  clock: (() => number) | undefined;
  /** RLQS_UNMATCHED_ACTION: what a bucket that matches no rule is told. */
  unmatched: 'allow' | 'deny';
  /** The least TTL of an assignment. */
  ttlFloorMs: number;
  /** How many buckets one stream may hold. */
  maxBuckets: number;
  /** Over-admission as the reports show it (admissions.ts), shared by the process's streams. */
  admissions?: AdmissionWatch;
  /** Told of reported allowed requests past their rule's limit in its window. */
  onOverAdmitted?(requests: number): void;
}

export class BucketLimitError extends Error {}

interface Held {
  /** It has matched a rule: when it no longer does, its rule is gone and it is abandoned. */
  matched: boolean;
  lastRate: number | undefined;
  strategy: Strategy | undefined;
  intervalMs: number | undefined;
}

export interface Session {
  /** The actions for one report's buckets; rejects with StoreError, or BucketLimitError. */
  report(domain: string, usages: readonly BucketUsage[]): Promise<BucketAction[]>;
  /** Buckets the stream holds now. */
  buckets(): number;
}

const sameStrategy = (a: Strategy | undefined, b: Strategy): boolean =>
  a !== undefined && JSON.stringify(a) === JSON.stringify(b);

function poolOf(counter: CounterCheck): Pool {
  return {
    ratePerSecond: counter.limit / (counter.windowMs / 1000),
    burst: counter.algorithm === 'token_bucket' ? counter.burst : undefined,
    windowMs: counter.windowMs,
  };
}

/**
 * A window rule's rate R, paced by what its counter has left: at most what remains over the
 * time left in the window (epoch-aligned, the counter's own reset for a fixed window), never less
 * than one reporting interval. Alone at R, RLQS clients leave the pace at R; when classic checks
 * (or fallbacks) take part of the window, the streams' shares shrink until it ends. A token-bucket
 * rule keeps R: its counter refills as it goes.
 */
function pacedPool(
  counter: CounterCheck,
  result: CounterResult | undefined,
  nowMs: number,
  intervalMs: number | undefined,
): Pool {
  const pool = poolOf(counter);
  if (counter.algorithm === 'token_bucket' || result === undefined) return pool;
  const left =
    counter.algorithm === 'fixed_window' && result.resetMs > 0
      ? result.resetMs
      : counter.windowMs - (nowMs % counter.windowMs);
  const seconds = Math.max(left, intervalMs ?? 1000, 1000) / 1000;
  const pace = Math.max(0, result.remaining) / seconds;
  return pace < pool.ratePerSecond ? { ...pool, ratePerSecond: pace } : pool;
}

/**
 * Charges a report's allowed requests to its counters, with overdraw: they were admitted already.
 * Charged even when none was (cost 0 consumes nothing): what each counter has left paces the
 * shares, so that classic checks on the same counter leave RLQS less. Resolves with the counters'
 * results, and tells of what passed a limit in its window.
 */
async function charge(
  options: SessionOptions,
  counters: readonly CounterCheck[],
  allowed: number,
  nowMs: number | undefined,
): Promise<CounterResult[]> {
  const charged = counters.map((counter) => ({
    ...counter,
    cost: Math.min(allowed, COST_CAP),
    overdraw: true,
    shadow: false,
    quota: false,
    reference: undefined,
  }));
  const { results } = await options.store.decide(charged, nowMs);
  if (allowed > 0 && options.admissions) {
    const at = nowMs ?? Date.now();
    for (const counter of counters) {
      if (counter.shadow) continue;
      const over = options.admissions.add(
        counter.key,
        counter.limit,
        counter.windowMs,
        allowed,
        at,
      );
      if (over > 0) options.onOverAdmitted?.(over);
    }
  }
  return results;
}

export function createSession(options: SessionOptions): Session {
  const held = new Map<string, Held>();
  const blanket = (rule: 'ALLOW_ALL' | 'DENY_ALL'): Strategy => ({ kind: 'blanket', rule });

  async function one(domain: string, usage: BucketUsage): Promise<BucketAction> {
    const name = bucketName(usage.bucket);
    let state = held.get(name);
    if (state === undefined) {
      if (held.size >= options.maxBuckets) {
        throw new BucketLimitError(
          `this stream holds ${options.maxBuckets} buckets, RLQS_MAX_BUCKETS_PER_STREAM`,
        );
      }
      state = { matched: false, lastRate: undefined, strategy: undefined, intervalMs: undefined };
      held.set(name, state);
    }
    if (usage.elapsedMs !== undefined && usage.elapsedMs > 0) state.intervalMs = usage.elapsedMs;
    const ttlMs = assignmentTtlMs(state.intervalMs, options.ttlFloorMs);
    const ruleSet = options.rules();
    const rules = ruleSet.domains.get(domain);
    const path = rules && bucketPath(rules, usage.bucket);
    const counters = path
      ? planCheck(bucketCheck(domain, path, 1), ruleSet, options.plan).counters
      : [];
    if (counters.length === 0) {
      if (state.matched && path === undefined) {
        held.delete(name);
        return { bucket: usage.bucket, kind: 'abandon' };
      }
      const strategy = blanket(
        path === undefined && options.unmatched === 'deny' ? 'DENY_ALL' : 'ALLOW_ALL',
      );
      state.strategy = strategy;
      return { bucket: usage.bucket, kind: 'assign', strategy, ttlMs };
    }
    state.matched = true;
    const nowMs = options.clock?.();
    const results = await charge(options, counters, usage.allowed, nowMs);
    const enforced = counters.filter((counter) => !counter.shadow);
    if (enforced.length === 0) {
      state.strategy = blanket('ALLOW_ALL');
      return { bucket: usage.bucket, kind: 'assign', strategy: state.strategy, ttlMs };
    }
    const seconds = Math.max(0.001, (state.intervalMs ?? 1000) / 1000);
    const demand = (usage.allowed + usage.denied) / seconds;
    const consumer = `${options.streamId}|${name}`;
    const shares: PoolShare[] = await Promise.all(
      counters.map(async (counter, at) => {
        if (counter.shadow) return undefined;
        const pool = await options.demand.record(
          `${counter.key}:rlqs`,
          consumer,
          demand,
          ttlMs,
          nowMs,
        );
        const paced = pacedPool(counter, results[at], nowMs ?? Date.now(), state.intervalMs);
        // Past the pool's consumer bound this one is not recorded, but its share still counts it.
        const totalDemand = pool.recorded ? pool.totalDemand : pool.totalDemand + demand;
        const consumers = pool.recorded ? pool.consumers : pool.consumers + 1;
        return { pool: paced, demand, totalDemand, consumers };
      }),
    ).then((all) => all.filter((share) => share !== undefined));
    const budget = consumerBudget(shares);
    if (budget.ratePerSecond <= 0) {
      // The window has nothing left: denied until a report after it rolls over.
      state.lastRate = 0;
      state.strategy = blanket('DENY_ALL');
      return { bucket: usage.bucket, kind: 'assign', strategy: state.strategy, ttlMs };
    }
    if (
      !movedEnough(state.lastRate, budget.ratePerSecond) &&
      state.strategy?.kind === 'token_bucket'
    ) {
      return { bucket: usage.bucket, kind: 'assign', strategy: state.strategy, ttlMs };
    }
    const strategy: Strategy = { kind: 'token_bucket', ...tokenBucketFor(budget) };
    if (!sameStrategy(state.strategy, strategy)) state.lastRate = budget.ratePerSecond;
    state.strategy = strategy;
    return { bucket: usage.bucket, kind: 'assign', strategy, ttlMs };
  }

  return {
    async report(domain, usages) {
      return Promise.all(usages.map((usage) => one(domain, usage)));
    },
    buckets: () => held.size,
  };
}
