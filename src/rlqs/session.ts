/**
 * One RLQS stream's logic, without gRPC: a usage report in, the bucket actions out. For each
 * bucket of the report it
 * 1. matches the bucket against the rules of the stream's domain (buckets.ts);
 * 2. charges the reported allowed requests to the same counters a classic check uses, with
 *    overdraw, since those requests were already admitted, and ahead: what its client will admit
 *    before its next report is charged now, so that classic checks see it (charging.ts);
 * 3. measures the bucket's demand (allowed plus denied per second, usage.ts), records it on each
 *    enforced counter's pool, and reads back every consumer's (store/demand.ts);
 * 4. answers the token bucket of its share (assign.ts), the same strategy again (which extends
 *    the TTL) until the share has moved for good (`settle`); what it holds of a window that the
 *    charge filled, as a lower rate, or DENY_ALL when it holds none (charging.ts `roomLeft`); a
 *    blanket rule when no counter limits it; `abandon_action` when the rule it matched is gone.
 */
import { ResourceLimitError, StoreError } from '../core/errors.js';
import { planCheck } from '../decision/plan.js';
import type { PlanPolicy } from '../decision/plan.js';
import type { RuleSet } from '../rules/types.js';
import type { CounterCheck, Store } from '../store/Store.js';
import {
  RELEASED_REPORTING_MS,
  assignmentTtlMs,
  BRIEF_REPORT_MS,
  consumerBudget,
  settle,
  tokenBucketFor,
  type PoolShare,
  type Settled,
  type TokenBucketStrategy,
} from './assign.js';
import { bucketCheck, bucketName, bucketPath, type Bucket } from './buckets.js';
import type { DemandStore } from '../store/demand.js';
import {
  asReported,
  charge,
  poolKey,
  poolOf,
  releaseReserves,
  reserveAhead,
  roomLeft,
  reserveSpan,
  type CounterCharge,
  type Reserve,
} from './charging.js';
import { createResumer, scheduleTimer, type Schedule } from './resume.js';
import { ELAPSED_SLACK_MS, MAX_ELAPSED_MS, checkPlausible, clampElapsed } from './trust.js';
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
  /** Told of reported allowed requests that landed past their rule's limit (charging.ts). */
  onOverAdmitted?(requests: number): void;
  /** A monotonic clock in ms, for the time a report could cover; performance.now by default. */
  monotonic?: () => number;
  /**
   * Sends actions unasked: the stream runs `work` after the reports queued before it, and sends
   * the actions it resolves with. Without it, a bucket held back to a window's end waits for
   * its next report.
   */
  push?(work: () => Promise<BucketAction[]>): void;
  /** Timers for the moments buckets are resumed (resume.ts); real timers by default. */
  schedule?: Schedule;
}

/** One bucket more than a stream may hold, or a report of more. */
export class BucketLimitError extends ResourceLimitError {}

/** A bucket the stream holds: its demand so far, and what it was last told. */
interface Held extends DemandMeter {
  /** It has matched a rule: when it no longer does, its rule is gone and it is abandoned. */
  matched: boolean;
  /** The rate its token bucket enforces, settled (assign.ts); undefined after a blanket rule. */
  settled: Settled | undefined;
  strategy: Strategy | undefined;
  /** The demand pools it was recorded in, to leave when the stream closes. */
  pools: Set<string>;
  /** When its last report came (the monotonic clock). */
  seenAt: number;
  /** Per counter key, what it holds charged ahead of its client's admissions (charging.ts). */
  reserves: Map<string, Reserve>;
  /** The counters its last report was charged on: where its reserves are given back. */
  counters: CounterCheck[];
  /**
   * Held back to a window's end (denied, or slowed to what it held of the window): the wall time
   * it is sent its share again (resume.ts), with what its last report was charged on.
   */
  heldBack?: HeldBack;
}

/** What a bucket's last assignment was made from, to make its next when it is resumed. */
interface HeldFrom {
  prepared: Prepared;
  shares: readonly PoolShare[];
}

/** A bucket held back to a window's end (wall ms). */
interface HeldBack extends HeldFrom {
  untilMs: number;
}

/** Buckets of a report whose store calls are sent at once. */
const REPORT_PART = 50;

/** A bucket of a report, checked, with the counters its rules reach. */
interface Prepared {
  name: string;
  /** The usage, its time_elapsed clamped to what the stream saw. */
  usage: BucketUsage;
  /** It matched a rule (that may limit nothing: unlimited). */
  matched: boolean;
  counters: CounterCheck[];
  at: number;
  /**
   * The time its requests came over, on this side's clock since the bucket's last report
   * (Envoy's whole seconds would lose up to one), at most a second past what it says; for the
   * bucket's first report on the stream, what it says.
   */
  coveredMs: number;
  /** Its time_elapsed shows the reporting interval (not clamped on a new stream). */
  learnsInterval: boolean;
}

export interface Session {
  /**
   * The actions for one report's buckets; rejects with StoreError once the store has failed for
   * longer than an assignment's TTL, BucketLimitError, or
   * InvalidRequestError for a report that claims more than it could have seen (trust.ts).
   */
  report(domain: string, usages: readonly BucketUsage[]): Promise<BucketAction[]>;
  /** Buckets the stream holds now. */
  buckets(): number;
  /** The stream closed: its buckets' demand leaves their pools, and no bucket is resumed. Never rejects. */
  close(): Promise<void>;
}

/** The bucket the stream holds under `name`, held now if new; BucketLimitError past the bound. */
function holdBucket(
  held: Map<string, Held>,
  name: string,
  maxBuckets: number,
  openedAt: number,
): Held {
  let state = held.get(name);
  if (state === undefined) {
    if (held.size >= maxBuckets) {
      throw new BucketLimitError(
        `this stream holds ${maxBuckets} buckets, RLQS_MAX_BUCKETS_PER_STREAM`,
      );
    }
    state = newHeld(openedAt);
    held.set(name, state);
  }
  return state;
}

function newHeld(seenAt: number): Held {
  return {
    ...newDemandMeter(),
    seenAt,
    reserves: new Map(),
    counters: [],
    matched: false,
    settled: undefined,
    strategy: undefined,
    pools: new Set(),
  };
}

/**
 * A bucket of a report, read against the rules and the bounds of what it may claim (trust.ts),
 * before anything of the report is charged or recorded: throws InvalidRequestError. `seenAt`:
 * when the stream last heard of the bucket, or opened.
 */
function prepare(
  options: SessionOptions,
  report: {
    domain: string;
    name: string;
    usage: BucketUsage;
    index: number;
    at: number;
    seenAt: number;
    /** The stream has not heard of the bucket before. */
    first: boolean;
  },
): Prepared {
  const { domain, name, usage, at } = report;
  const seenMs = at - report.seenAt;
  const elapsedMs = clampElapsed(usage.elapsedMs, seenMs);
  const ruleSet = options.rules();
  const rules = ruleSet.domains.get(domain);
  const path = rules && bucketPath(rules, usage.bucket);
  const counters = path
    ? planCheck(bucketCheck(domain, path, 1), ruleSet, options.plan, path.nodes).counters
    : [];
  checkPlausible(usage, report.index, elapsedMs ?? Math.max(0, seenMs), counters);
  // A bucket's first report on a stream may cover time from before it (an Envoy that opened its
  // stream again reports what it counted since its last report on the old one): its requests are
  // taken over what it says, if longer, which can only lower its demand. The clamped time still bounds what
  // it may claim, and it teaches no reporting interval.
  const claimedMs = Math.min(usage.elapsedMs ?? 0, MAX_ELAPSED_MS);
  const seenCoveredMs = Math.max(
    0,
    Math.min(seenMs, (elapsedMs ?? MAX_ELAPSED_MS - ELAPSED_SLACK_MS) + ELAPSED_SLACK_MS),
  );
  const coveredMs = report.first ? Math.max(claimedMs, seenCoveredMs) : seenCoveredMs;
  const matched = path !== undefined;
  const learnsInterval = !report.first || elapsedMs === usage.elapsedMs;
  return {
    name,
    usage: { ...usage, elapsedMs },
    matched,
    counters,
    at,
    coveredMs,
    learnsInterval,
  };
}

/** The token bucket of the consumer's budget, at the rate settled on (assign.ts, `settle`). */
function tokenBucketStrategy(
  state: Held,
  shares: readonly PoolShare[],
  atMs: number,
  brief: boolean,
): { strategy: Strategy; settled: Settled } {
  const budget = consumerBudget(shares);
  const settled = settle(state.settled, budget.ratePerSecond, atMs, brief);
  if (settled.rate === state.settled?.rate && state.strategy?.kind === 'token_bucket') {
    return { strategy: state.strategy, settled };
  }
  // A kept rate keeps its burst in proportion.
  const scale = budget.ratePerSecond > 0 ? settled.rate / budget.ratePerSecond : 1;
  const burst = budget.burst === undefined ? undefined : budget.burst * scale;
  const strategy: Strategy = {
    kind: 'token_bucket',
    ...tokenBucketFor({ ...budget, ratePerSecond: settled.rate, burst }),
  };
  return { strategy, settled };
}

/**
 * Records a bucket's demand in the pool of each of its enforced counters, and reads back each
 * pool's: the bucket's shares.
 */
async function recordDemand(
  options: SessionOptions,
  state: Held,
  enforced: readonly CounterCheck[],
  bucket: {
    consumer: string;
    demand: number;
    /** The demand is a first estimate, from less than a span of reports (usage.ts). */
    estimated: boolean;
    ttlMs: number;
    nowMs: number | undefined;
  },
): Promise<PoolShare[]> {
  const { consumer, demand, estimated, ttlMs, nowMs } = bucket;
  return Promise.all(
    enforced.map(async (counter) => {
      const key = poolKey(counter);
      state.pools.add(key);
      const rule = poolOf(counter);
      // No consumer can use more than the whole pool: what it claims past that takes nothing.
      const own = Math.min(demand, rule.ratePerSecond);
      // A joining bucket's first estimate is low (its first report is Envoy's immediate one, of a
      // request or two), so the others see it as wanting the whole pool until it is measured:
      // they make room at once, rather than take what it will want. Its own share is its
      // estimate's.
      const claim = estimated ? rule.ratePerSecond : own;
      const pool = await options.demand.record(key, consumer, claim, ttlMs, nowMs);
      // Past the pool's consumer bound this one is not recorded, but its share still counts it.
      const totalDemand = (pool.recorded ? pool.totalDemand - claim : pool.totalDemand) + own;
      const consumers = pool.recorded ? pool.consumers : pool.consumers + 1;
      return { pool: rule, demand: own, totalDemand, consumers };
    }),
  );
}

/**
 * A bucket's action, or, while the store fails, what it was last told: a stream outlives a slow
 * or lost store for an assignment's TTL, and ends UNAVAILABLE (Envoy then falls back) only past
 * it. A bucket never assigned gets no action meanwhile, and a stream the store has never answered
 * ends at once: it has nothing to answer from. The failed call is not sent again: it may have
 * been applied, and its charge would land twice.
 */
function outliveStore(
  options: SessionOptions,
  held: ReadonlyMap<string, Held>,
  monotonic: () => number,
  one: (prepared: Prepared) => Promise<BucketAction>,
): (prepared: Prepared) => Promise<BucketAction | undefined> {
  /** Since when the store has failed this stream's calls, with none answered since. */
  let failingSince: number | undefined;
  let answered = false;
  return async (prepared) => {
    try {
      const action = await one(prepared);
      failingSince = undefined;
      answered = true;
      return action;
    } catch (error) {
      if (!(error instanceof StoreError) || !answered) throw error;
      failingSince ??= prepared.at;
      const state = held.get(prepared.name);
      const ttlMs = assignmentTtlMs(state?.intervalMs, options.ttlFloorMs);
      if (monotonic() - failingSince >= ttlMs) throw error;
      if (state?.strategy === undefined) return undefined;
      return { bucket: prepared.usage.bucket, kind: 'assign', strategy: state.strategy, ttlMs };
    }
  };
}

/**
 * Per counter, what to charge for this report, charging ahead (charging.ts, `reserveAhead`): the
 * reserve's target is what the bucket's client will admit at `rate` (and at most its demand)
 * before its next report, expected a reporting interval away, or as far as this one came, or
 * before the window ends (a token bucket's never does). Counters not charged ahead (charging.ts
 * `reserveSpan`) are charged as reported.
 */
function reportCosts(
  state: Held,
  prepared: Prepared,
  report: { rate: number; demand: number; wallMs: number },
): { charges: CounterCharge[]; reserves: [string, Reserve][] } {
  const intervalMs = Math.max(state.intervalMs ?? RELEASED_REPORTING_MS, prepared.coveredMs);
  const perMs = Math.min(report.rate, report.demand) / 1000;
  const allowed = prepared.usage.allowed;
  const reserves: [string, Reserve][] = [];
  const charges = prepared.counters.map((counter) => {
    const window = reserveSpan(counter, report.wallMs);
    if (window === undefined) return asReported(allowed);
    const target = perMs * Math.min(intervalMs, window.leftMs);
    const last = state.reserves.get(counter.key);
    const ahead = reserveAhead(last, allowed, target, window.index);
    reserves.push([counter.key, ahead.reserve]);
    return ahead.charge;
  });
  return { charges, reserves };
}

/**
 * The bucket's token bucket from its shares, charged for: the report's allowed requests and the
 * reserve for what the new assignment will admit before the next report (reportCosts), in one
 * store call. When the charge fills a window (classic checks or fallbacks took more than their
 * part, charging.ts `roomLeft`), the bucket gets what its reserve still holds of it, as a lower
 * rate to the window's end, and gives the rest back; with nothing held, DENY_ALL, until the
 * window rolls over (`untilMs`: then the bucket is resumed) or a report after it. Either way
 * the next assignment takes its share afresh.
 */
async function chargeAndAssign(
  options: SessionOptions,
  state: Held,
  prepared: Prepared,
  report: {
    shares: readonly PoolShare[];
    /** Its demand, a second; Infinity while only estimated: the reserve takes its rate. */
    demand: number;
    /** The report covers too little time to move a rate but down (assign.ts, `settle`). */
    brief: boolean;
    nowMs: number | undefined;
    wallMs: number;
  },
): Promise<{ strategy: Strategy; untilMs?: number }> {
  const { strategy, settled } = tokenBucketStrategy(
    state,
    report.shares,
    prepared.at,
    report.brief,
  );
  const { charges, reserves } = reportCosts(state, prepared, {
    rate: settled.rate,
    demand: report.demand,
    wallMs: report.wallMs,
  });
  // A charge that fails leaves the bucket as it was: it is answered from its last assignment
  // (outliveStore), and its reserves are those last charged.
  const results = await charge(options, prepared.counters, charges, report.nowMs);
  state.settled = settled;
  for (const [key, reserve] of reserves) state.reserves.set(key, reserve);
  const room = roomLeft(prepared.counters, results, state.reserves, {
    wallMs: report.wallMs,
    intervalMs: state.intervalMs ?? RELEASED_REPORTING_MS,
  });
  if (room.kind === 'open') return { strategy };
  state.settled = undefined;
  const ratePerSecond = room.kind === 'spent' ? 0 : Math.min(room.ratePerSecond, settled.rate);
  await releaseReserves(options.store, prepared.counters, state.reserves, {
    ...report,
    ratePerSecond,
  });
  if (ratePerSecond <= 0)
    return { strategy: { kind: 'blanket', rule: 'DENY_ALL' }, untilMs: room.untilMs };
  const budget = consumerBudget(report.shares);
  const graded: Strategy = {
    kind: 'token_bucket',
    ...tokenBucketFor({ ...budget, ratePerSecond, burst: undefined }),
  };
  return { strategy: graded, untilMs: room.untilMs };
}

/**
 * A closed stream's buckets leave: their demand leaves their pools, and what they hold charged
 * ahead is given back (an Envoy that opens its stream again reports what it admitted meanwhile
 * on the new one, where it is charged in full). Best effort: a consumer that is not forgotten
 * expires with its TTL, and a reserve left counts early in its window.
 */
async function leave(
  options: SessionOptions,
  buckets: readonly (readonly [string, Held])[],
  consumerOf: (name: string) => string,
): Promise<void> {
  const nowMs = options.clock?.();
  const at = { nowMs, wallMs: nowMs ?? Date.now(), ratePerSecond: 0 };
  await inParts(buckets, async ([name, state]) => {
    await Promise.all([
      ...[...state.pools].map((pool) =>
        options.demand.forget(pool, consumerOf(name)).catch(() => {}),
      ),
      releaseReserves(options.store, state.counters, state.reserves, at).catch(() => {}),
    ]);
    return undefined;
  });
}

/**
 * A stream's buckets' store work a part at a time (a report's, a resumption's, a close's): each
 * store call's deadline starts when it is sent, and a thousand at once would queue on the
 * connection past REDIS_TIMEOUT, and ahead of classic checks. Resolves with the results that
 * are not undefined, in order.
 */
async function inParts<T, R>(
  items: readonly T[],
  work: (item: T) => Promise<R | undefined>,
): Promise<R[]> {
  const results: R[] = [];
  for (let start = 0; start < items.length; start += REPORT_PART) {
    const part = items.slice(start, start + REPORT_PART);
    for (const result of await Promise.all(part.map(work))) {
      if (result !== undefined) results.push(result);
    }
  }
  return results;
}

/**
 * Buckets held back to a window's end (resume.ts): `holdBack` marks one, and once its window has
 * rolled over, the stream is sent its new action unasked, unless a report answered it since.
 */
function resumption(
  options: SessionOptions,
  held: ReadonlyMap<string, Held>,
  monotonic: () => number,
): {
  holdBack(name: string, state: Held, untilMs: number | undefined, from: HeldFrom): void;
  close(): void;
} {
  const resumer = createResumer({
    schedule: options.schedule ?? scheduleTimer,
    wallNow: () => options.clock?.() ?? Date.now(),
    resume: (names, atMs) => options.push?.(() => resumeAll(names, atMs)),
  });

  /** Marks the bucket held back until `untilMs` (none: it is not), to be resumed then. */
  function holdBack(name: string, state: Held, untilMs: number | undefined, from: HeldFrom): void {
    if (untilMs === undefined || options.push === undefined) {
      state.heldBack = undefined;
      return;
    }
    state.heldBack = { ...from, untilMs };
    resumer.at(name, untilMs);
  }

  /** The actions of the buckets held back until `atMs` that no report has answered since. */
  function resumeAll(names: readonly string[], atMs: number): Promise<BucketAction[]> {
    return inParts(names, async (name) => {
      const state = held.get(name);
      const back = state?.heldBack;
      if (state === undefined || back === undefined || back.untilMs !== atMs) return undefined;
      state.heldBack = undefined;
      // A store that fails now leaves the bucket to its next report.
      return resumeOne(name, state, back).catch(() => undefined);
    });
  }

  /**
   * A held-back bucket in its new window: its share again, charged ahead as a report of no
   * requests would be, from the shares of its last report. Still held back (classic checks
   * already filled the new window), a denied bucket is told nothing new.
   */
  async function resumeOne(
    name: string,
    state: Held,
    back: HeldBack,
  ): Promise<BucketAction | undefined> {
    const nowMs = options.clock?.();
    const usage = { ...back.prepared.usage, allowed: 0, denied: 0, elapsedMs: 0 };
    const prepared = { ...back.prepared, usage, at: monotonic(), coveredMs: 0 };
    const old = new Map(state.reserves);
    const assigned = await chargeAndAssign(options, state, prepared, {
      shares: back.shares,
      demand: state.demand ?? Infinity,
      brief: false,
      nowMs,
      wallMs: nowMs ?? Date.now(),
    });
    // What the bucket held of the window that ended was admitted there, and charged there: its
    // next report carries it, and it is not to come out of the new window's reserve.
    for (const [key, reserve] of state.reserves) {
      const before = old.get(key);
      if (before !== undefined && before.window !== reserve.window) {
        state.reserves.set(key, { ...reserve, before: before.requests });
      }
    }
    const before = state.strategy;
    state.strategy = assigned.strategy;
    holdBack(name, state, assigned.untilMs, back);
    if (assigned.strategy.kind !== 'token_bucket' && before?.kind === assigned.strategy.kind) {
      return undefined;
    }
    const ttlMs = assignmentTtlMs(state.intervalMs, options.ttlFloorMs);
    return { bucket: usage.bucket, kind: 'assign', strategy: assigned.strategy, ttlMs };
  }

  return { holdBack, close: () => resumer.close() };
}

export function createSession(options: SessionOptions): Session {
  const held = new Map<string, Held>();
  const blanket = (rule: 'ALLOW_ALL' | 'DENY_ALL'): Strategy => ({ kind: 'blanket', rule });
  /** A bucket of this stream, as a consumer of its rules' demand pools. */
  const consumerOf = (name: string) => `${options.streamId}|${name}`;

  const monotonic = options.monotonic ?? (() => performance.now());
  const openedAt = monotonic();
  const { holdBack, close: stopResuming } = resumption(options, held, monotonic);

  async function one(prepared: Prepared): Promise<BucketAction> {
    const { name, usage, counters, coveredMs } = prepared;
    const state = holdBucket(held, name, options.maxBuckets, openedAt);
    state.seenAt = prepared.at;
    state.counters = prepared.counters;
    const demand = measureDemand(state, usage, coveredMs, prepared.learnsInterval);
    const estimated = state.demand === undefined;
    const ttlMs = assignmentTtlMs(state.intervalMs, options.ttlFloorMs);
    if (counters.length === 0) {
      if (state.matched && !prepared.matched) {
        held.delete(name);
        return { bucket: usage.bucket, kind: 'abandon' };
      }
      const strategy = blanket(
        !prepared.matched && options.unmatched === 'deny' ? 'DENY_ALL' : 'ALLOW_ALL',
      );
      state.strategy = strategy;
      return { bucket: usage.bucket, kind: 'assign', strategy, ttlMs };
    }
    state.matched = true;
    const nowMs = options.clock?.();
    const wallMs = nowMs ?? Date.now();
    const enforced = counters.filter((counter) => !counter.shadow);
    if (enforced.length === 0) {
      await charge(
        options,
        counters,
        counters.map(() => asReported(usage.allowed)),
        nowMs,
      );
      state.strategy = blanket('ALLOW_ALL');
      return { bucket: usage.bucket, kind: 'assign', strategy: state.strategy, ttlMs };
    }
    const shares = await recordDemand(options, state, enforced, {
      consumer: consumerOf(name),
      demand,
      estimated,
      ttlMs,
      nowMs,
    });
    const assigned = await chargeAndAssign(options, state, prepared, {
      shares,
      demand: estimated ? Infinity : demand,
      brief: coveredMs < BRIEF_REPORT_MS,
      nowMs,
      wallMs,
    });
    state.strategy = assigned.strategy;
    holdBack(name, state, assigned.untilMs, { prepared, shares });
    return { bucket: usage.bucket, kind: 'assign', strategy: state.strategy, ttlMs };
  }

  const answer = outliveStore(options, held, monotonic, one);

  return {
    async report(domain, usages) {
      const at = monotonic();
      const prepared = usages.map((usage, index) => {
        const name = bucketName(usage.bucket);
        const known = held.get(name);
        const seenAt = known?.seenAt ?? openedAt;
        return prepare(options, {
          domain,
          name,
          usage,
          index,
          at,
          seenAt,
          first: known === undefined,
        });
      });
      return inParts(prepared, answer);
    },
    buckets: () => held.size,
    async close() {
      const buckets = [...held];
      held.clear();
      stopResuming();
      await leave(options, buckets, consumerOf);
    },
  };
}
