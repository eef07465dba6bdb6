/**
 * One RLQS stream's logic, without gRPC: a usage report in, the bucket actions out. For each
 * bucket of the report it
 * 1. matches the bucket against the rules of the stream's domain (buckets.ts);
 * 2. charges the reported allowed requests to the same counters a classic check uses, with
 *    overdraw, since those requests were already admitted;
 * 3. records the bucket's demand (allowed plus denied per second) on each enforced counter, and
 *    reads back every consumer's (store/demand.ts);
 * 4. answers the token bucket of its share (assign.ts), the same strategy again (which extends
 *    the TTL) unless the rate moved by more than 10%; a blanket rule when no counter limits it;
 *    `abandon_action` when the rule it matched is gone.
 */
import { ResourceLimitError } from '../core/errors.js';
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
import type { DemandStore } from '../store/demand.js';

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

/** One bucket more than a stream may hold, or a report of more. */
export class BucketLimitError extends ResourceLimitError {}

interface Held {
  /** It has matched a rule: when it no longer does, its rule is gone and it is abandoned. */
  matched: boolean;
  lastRate: number | undefined;
  strategy: Strategy | undefined;
  intervalMs: number | undefined;
  /** Requests (allowed plus denied) and time reported since the demand was last measured. */
  pending: { requests: number; elapsedMs: number };
  /** Requests a second, measured over at least DEMAND_SPAN_MS; undefined until then. */
  demand: number | undefined;
  /** The demand pools it was recorded in, to leave when the stream closes. */
  pools: Set<string>;
}

/**
 * Demand is measured over at least this long (or one reporting interval, if longer), and over at
 * least DEMAND_REQUESTS requests, then smoothed: Envoy also reports at once for a new bucket and
 * after a changed assignment, a report that covers a few milliseconds says little about a rate, and
 * a bucket of a few requests a second is noisy. A share that swings sends new strategies, each a
 * full token bucket.
 */
const DEMAND_SPAN_MS = 1_000;
/** A span holds at least this many requests, unless it reaches LONGEST_SPAN_MS. */
const DEMAND_REQUESTS = 20;
const LONGEST_SPAN_MS = 10_000;
/** Each span moves the demand this part of the way to what it measured. */
const DEMAND_SMOOTHING = 0.5;
/** Reports shorter than this are not reporting intervals (Envoy's is more than 100 ms). */
const SHORTEST_INTERVAL_MS = 100;

/** Adds a report to the bucket's demand, and learns the reporting interval from it. */
function measureDemand(state: Held, usage: BucketUsage): number {
  const elapsed = usage.elapsedMs ?? 0;
  if (elapsed >= SHORTEST_INTERVAL_MS) {
    // Up at once to a longer interval; down slowly, past the odd short report.
    state.intervalMs =
      state.intervalMs === undefined ? elapsed : Math.max(elapsed, state.intervalMs * 0.8);
  }
  state.pending.requests += usage.allowed + usage.denied;
  state.pending.elapsedMs += elapsed;
  const span = Math.max(DEMAND_SPAN_MS, state.intervalMs ?? 0);
  const { requests, elapsedMs } = state.pending;
  // A slow bucket is measured over more requests, up to the longest span.
  if (elapsedMs >= span && (requests >= DEMAND_REQUESTS || elapsedMs >= LONGEST_SPAN_MS)) {
    const measured = requests / (elapsedMs / 1000);
    state.demand =
      state.demand === undefined
        ? measured
        : state.demand + DEMAND_SMOOTHING * (measured - state.demand);
    state.pending = { requests: 0, elapsedMs: 0 };
  } else if (state.demand === undefined) {
    // A first estimate, until a whole span has been seen.
    const seconds = Math.max(SHORTEST_INTERVAL_MS, state.pending.elapsedMs) / 1000;
    return state.pending.requests / seconds;
  }
  return state.demand;
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

/**
 * A window rule's rate leaves room for one second of it: each stream's token bucket may start
 * full once a window (a changed share, or a new window after a spent one), and Envoy admits that
 * bucket on top of its refill. Windows under 10 s keep the whole rate.
 */
const RESERVED_MS = 1_000;
const RESERVE_FROM_MS = 10_000;

function poolOf(counter: CounterCheck): Pool {
  const windowRate = counter.limit / (counter.windowMs / 1000);
  const reserve =
    counter.algorithm !== 'token_bucket' && counter.windowMs >= RESERVE_FROM_MS
      ? RESERVED_MS / counter.windowMs
      : 0;
  return {
    ratePerSecond: windowRate * (1 - reserve),
    burst: counter.algorithm === 'token_bucket' ? counter.burst : undefined,
    windowMs: counter.windowMs,
  };
}

/** Where a rule counter's RLQS demand lives: beside the counter, under its hash tag. */
const poolKey = (counter: CounterCheck): string => `${counter.key}:rlqs`;

/**
 * A window rule's counter that has less left in its window than half of what its RLQS clients
 * would take, at the rule's rate, before this stream's next report (or the window's end, if
 * sooner): classic checks (or fallbacks) have taken more than their part. Denied now, the rest
 * goes to classic checks. Clients alone on a rule keep to its pace, and are never denied so.
 */
function spent(
  counters: readonly CounterCheck[],
  results: readonly CounterResult[],
  intervalMs: number | undefined,
): boolean {
  return counters.some((counter, at) => {
    const result = results[at];
    if (counter.shadow || counter.algorithm === 'token_bucket' || result === undefined) {
      return false;
    }
    let untilNextMs = intervalMs ?? 1_000;
    if (counter.algorithm === 'fixed_window' && result.resetMs >= 0) {
      untilNextMs = Math.min(untilNextMs, result.resetMs);
    }
    const expected = (poolOf(counter).ratePerSecond * untilNextMs) / 1_000;
    return result.remaining <= 0 || result.remaining < expected / 2;
  });
}

/**
 * Charges a report's allowed requests to its counters, with overdraw: they were admitted already.
 * Charged even when none was (cost 0 consumes nothing): a window that classic checks have spent
 * is answered DENY_ALL. Resolves with the counters'
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

function newHeld(): Held {
  return {
    matched: false,
    lastRate: undefined,
    strategy: undefined,
    intervalMs: undefined,
    pending: { requests: 0, elapsedMs: 0 },
    demand: undefined,
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
