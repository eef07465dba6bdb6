/**
 * One RLQS stream's logic, without gRPC: a usage report in, the bucket actions out. For each
 * bucket of the report it
 * 1. matches the bucket against the rules of the stream's domain (buckets.ts);
 * 2. charges the reported allowed requests to the same counters a classic check uses, with
 *    overdraw, since those requests were already admitted (charging.ts);
 * 3. measures the bucket's demand (allowed plus denied per second, usage.ts), records it on each
 *    enforced counter's pool, and reads back every consumer's (store/demand.ts);
 * 4. answers the token bucket of its share (assign.ts), the same strategy again (which extends
 *    the TTL) unless the rate moved by more than 10%; a blanket rule when no counter limits it;
 *    `abandon_action` when the rule it matched is gone.
 */
import { ResourceLimitError } from '../core/errors.js';
import { planCheck } from '../decision/plan.js';
import type { PlanPolicy } from '../decision/plan.js';
import type { RuleSet } from '../rules/types.js';
import type { Store } from '../store/Store.js';
import type { AdmissionWatch } from './admissions.js';
import {
  assignmentTtlMs,
  consumerBudget,
  movedEnough,
  tokenBucketFor,
  type PoolShare,
  type TokenBucketStrategy,
} from './assign.js';
import { bucketCheck, bucketName, bucketPath, type Bucket } from './buckets.js';
import type { DemandStore } from '../store/demand.js';
import { charge, poolKey, poolOf, spent } from './charging.js';
import { measureDemand, newDemandMeter, type BucketUsage, type DemandMeter } from './usage.js';

export type { BucketUsage } from './usage.js';

export type Strategy =
  | { kind: 'blanket'; rule: 'ALLOW_ALL' | 'DENY_ALL' }
  | ({ kind: 'token_bucket' } & TokenBucketStrategy);

export type BucketAction =
  | { bucket: Bucket; kind: 'assign'; strategy: Strategy; ttlMs: number }
  | { bucket: Bucket; kind: 'abandon' };

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

/** One bucket more than a stream may hold, or a report of more. */
export class BucketLimitError extends ResourceLimitError {}

/** A bucket the stream holds: its demand so far, and what it was last told. */
interface Held extends DemandMeter {
  /** It has matched a rule: when it no longer does, its rule is gone and it is abandoned. */
  matched: boolean;
  lastRate: number | undefined;
  strategy: Strategy | undefined;
  /** The demand pools it was recorded in, to leave when the stream closes. */
  pools: Set<string>;
}

export interface Session {
  /** The actions for one report's buckets; rejects with StoreError, or BucketLimitError. */
  report(domain: string, usages: readonly BucketUsage[]): Promise<BucketAction[]>;
  /** Buckets the stream holds now. */
  buckets(): number;
  /** The stream closed: its buckets' demand leaves their pools. Never rejects. */
  close(): Promise<void>;
}

const sameStrategy = (a: Strategy | undefined, b: Strategy): boolean =>
  a !== undefined && JSON.stringify(a) === JSON.stringify(b);

function newHeld(): Held {
  return {
    ...newDemandMeter(),
    matched: false,
    lastRate: undefined,
    strategy: undefined,
    pools: new Set(),
  };
}

export function createSession(options: SessionOptions): Session {
  const held = new Map<string, Held>();
  const blanket = (rule: 'ALLOW_ALL' | 'DENY_ALL'): Strategy => ({ kind: 'blanket', rule });
  /** A bucket of this stream, as a consumer of its rules' demand pools. */
  const consumerOf = (name: string) => `${options.streamId}|${name}`;

  async function one(domain: string, usage: BucketUsage): Promise<BucketAction> {
    const name = bucketName(usage.bucket);
    let state = held.get(name);
    if (state === undefined) {
      if (held.size >= options.maxBuckets) {
        throw new BucketLimitError(
          `this stream holds ${options.maxBuckets} buckets, RLQS_MAX_BUCKETS_PER_STREAM`,
        );
      }
      state = newHeld();
      held.set(name, state);
    }
    const demand = measureDemand(state, usage);
    const ttlMs = assignmentTtlMs(state.intervalMs, options.ttlFloorMs);
    const ruleSet = options.rules();
    const rules = ruleSet.domains.get(domain);
    const path = rules && bucketPath(rules, usage.bucket);
    const counters = path
      ? planCheck(bucketCheck(domain, path, 1), ruleSet, options.plan, path.nodes).counters
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
    const shares: PoolShare[] = await Promise.all(
      enforced.map(async (counter) => {
        const key = poolKey(counter);
        state.pools.add(key);
        const pool = await options.demand.record(key, consumerOf(name), demand, ttlMs, nowMs);
        // Past the pool's consumer bound this one is not recorded, but its share still counts it.
        const totalDemand = pool.recorded ? pool.totalDemand : pool.totalDemand + demand;
        const consumers = pool.recorded ? pool.consumers : pool.consumers + 1;
        return { pool: poolOf(counter), demand, totalDemand, consumers };
      }),
    );
    if (spent(counters, results, state.intervalMs)) {
      // Classic checks (or fallbacks) took the window: denied until a report after it rolls over.
      state.lastRate = 0;
      state.strategy = blanket('DENY_ALL');
      return { bucket: usage.bucket, kind: 'assign', strategy: state.strategy, ttlMs };
    }
    const budget = consumerBudget(shares);
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
    async close() {
      const leaving = [...held].flatMap(([name, state]) =>
        [...state.pools].map((pool) => [pool, consumerOf(name)] as const),
      );
      held.clear();
      // Best effort: a consumer that is not forgotten expires with its TTL.
      await Promise.all(
        leaving.map(([pool, consumer]) => options.demand.forget(pool, consumer).catch(() => {})),
      );
    },
  };
}
