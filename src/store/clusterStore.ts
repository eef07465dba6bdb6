import type { StoreError } from '../core/errors.js';
import type { CounterCheck, CounterResult, Store, StoreDecision } from './Store.js';
import { createBatcher } from './batcher.js';
import {
  batchCall,
  decideArgs,
  decideCall,
  readPartDecision,
  refundable,
  refundArgs,
  type CallDecision,
  type ScriptCall,
} from './script.js';
import { withDeadline } from './deadline.js';
import { keySlot } from './slots.js';

/**
 * The store on Redis Cluster. A script may touch the keys of one slot only, and every counter of
 * a tenant shares its tenant's slot (keys.ts), so a request whose counters share a slot is one
 * script call, exactly as on a single Redis. Such requests made together are batched as on a
 * single Redis (batcher.ts, REDIS_BATCH_LIMIT), with one batcher per slot: a batch is one script
 * call, so it too must hold the keys of one slot.
 *
 * Per slot, not per node: Redis refuses a script whose declared keys span slots (CROSSSLOT), even
 * when one node serves them all and even with the `allow-cross-slot-keys` flag, which only lets a
 * script reach keys it did not declare; and a script that reaches an undeclared key of a slot
 * being migrated fails at that command, after the requests before it in the batch were written,
 * so they would be counted yet answered as failures (or counted twice if sent again). Within one
 * slot, Redis answers MOVED, ASK or TRYAGAIN before a script runs, never during it: a batch runs
 * once, wherever the client's redirections take it, or not at all. While a slot migrates, a call
 * of several distinct keys gets TRYAGAIN until they are all on one node; a batch still refused at
 * REDIS_TIMEOUT fails its requests as FAILURE_MODE says, as a request of several counters does.
 *
 * A request that spans slots (a per-IP descriptor beside a tenant's, say) stays all or nothing,
 * optimistically: each slot's counters go to their slot in one call, all calls at once, each
 * deciding and consuming its own counters as usual, with quota counters left for this module to
 * judge across slots. When every call allowed (and a quota counter fit, if there are any), that was
 * the only round trip. Otherwise the request is OVER_LIMIT, and the calls that consumed are sent a
 * refund without waiting for it: it gives back exactly what they took while the window is still
 * the one it was taken in (see each algorithm's refund in lua/). So the cluster never admits more
 * than a single Redis would; between the consumption and its refund, it may admit less.
 *
 * One slot failing fails the whole request (FAILURE_MODE decides), and what the others took is
 * refunded the same way.
 */
export interface SlotBackend {
  /** One script call, sent to the master of its keys' slot. */
  run(call: ScriptCall): Promise<unknown>;
  /** Deletes keys that share one slot, resolving with how many existed. */
  del(keys: string[]): Promise<number>;
  /** Counts which of these keys, sharing one slot, exist. */
  exists(keys: string[]): Promise<number>;
  /** Resolves once every master answers. */
  ping(): Promise<void>;
  /** The health probe on every master (see Store.probe). */
  probe(nowMs: number | undefined): Promise<void>;
  close(): Promise<void>;
}

export interface ClusterStoreOptions {
  /** REDIS_TIMEOUT: the bound on each call, redirections and retries included. */
  timeoutMs: number;
  /** CLOCK_SKEW_TOLERANCE, as in RedisStoreOptions. */
  clockSkewToleranceMs: number;
  classify(error: unknown): StoreError;
  /** Hears refunds that failed; their requests were already answered. */
  onError?: (error: StoreError) => void;
  /** REDIS_BATCH_LIMIT: the most requests of one slot in one script call. 1, the default: none. */
  batchLimit?: number;
  /** REDIS_BATCH_WINDOW, in ms (see batcher.ts). */
  batchWindowMs?: number;
}

export function createClusterStore(backend: SlotBackend, options: ClusterStoreOptions): Store {
  const { classify } = options;
  const call = boundedCall(backend, options.timeoutMs, classify);
  const refunds = createRefunds(call, options.onError);
  const skewToleranceMs = options.clockSkewToleranceMs;
  const path: ClusterPath = {
    call,
    refunds,
    classify,
    skewToleranceMs,
    oneSlot: slotBatchers({ call, classify, skewToleranceMs }, options),
  };

  return {
    async decide(checks, nowMs) {
      return decideOnCluster(path, checks, nowMs);
    },

    async reset(keys) {
      return countPerSlot(keys, (group) => backend.del(group), classify);
    },

    async exists(keys) {
      return countPerSlot(keys, (group) => backend.exists(group), classify);
    },

    async ping() {
      try {
        await backend.ping();
      } catch (error) {
        throw classify(error);
      }
    },

    async probe(nowMs) {
      try {
        await backend.probe(nowMs);
      } catch (error) {
        throw classify(error);
      }
    },

    async close() {
      // Refunds under way still give back what they owe, each within REDIS_TIMEOUT.
      await refunds.landed();
      await backend.close();
    },
  };
}

/** One script call on its slot's master, bounded by REDIS_TIMEOUT; it rejects with StoreError. */
type SlotCall = <T>(script: ScriptCall, read: (reply: unknown) => T) => Promise<T>;

/** Refunds sent without waiting for them, kept until they land so that closing can await them. */
interface Refunds {
  /** Gives back what `checks` consumed in the window of `atMs`. */
  send(checks: CounterCheck[], atMs: number): void;
  landed(): Promise<unknown>;
}

/** A request whose counters all share `slot`: decided alone or in a batch of that slot. */
type OneSlotDecide = (
  slot: number,
  checks: readonly CounterCheck[],
  nowMs: number | undefined,
) => Promise<StoreDecision>;

/** What deciding a request needs, built once per store. */
interface ClusterPath {
  call: SlotCall;
  refunds: Refunds;
  classify(error: unknown): StoreError;
  skewToleranceMs: number;
  oneSlot: OneSlotDecide;
}

function boundedCall(
  backend: SlotBackend,
  timeoutMs: number,
  classify: (error: unknown) => StoreError,
): SlotCall {
  return async (script, read) => {
    try {
      return read(await withDeadline(backend.run(script), timeoutMs));
    } catch (error) {
      throw classify(error);
    }
  };
}

/** A refund's failure goes to `onError`: its request was already answered. */
function createRefunds(call: SlotCall, onError?: (error: StoreError) => void): Refunds {
  const pending = new Set<Promise<void>>();
  return {
    send(checks, atMs) {
      const sent: Promise<void> = call(
        { script: 'decision', args: refundArgs(checks, atMs) },
        () => undefined,
      )
        .catch((error: StoreError) => onError?.(error))
        .finally(() => pending.delete(sent));
      pending.add(sent);
    },
    landed: () => Promise.allSettled([...pending]),
  };
}

/**
 * The requests of each slot, batched as on a single Redis by a batcher of their slot's own. A
 * slot's batcher is made when a request of it arrives and dropped when its last request settles,
 * so there are only as many as the slots with requests under way, and never more than 16,384.
 */
function slotBatchers(
  path: Pick<ClusterPath, 'call' | 'classify' | 'skewToleranceMs'>,
  options: Pick<ClusterStoreOptions, 'batchLimit' | 'batchWindowMs'>,
): OneSlotDecide {
  const { call, classify, skewToleranceMs } = path;
  const sendOne = (checks: readonly CounterCheck[], nowMs: number | undefined) => {
    const decided = decideCall(checks, { nowMs, skewToleranceMs });
    return call(decided, (reply) => decided.read(reply));
  };
  const limit = options.batchLimit ?? 1;
  if (limit <= 1) return (_slot, checks, nowMs) => sendOne(checks, nowMs);

  const batchers = new Map<number, { decide: OneSlotBatcher; pending: number }>();
  const create = (): OneSlotBatcher =>
    createBatcher({
      limit,
      windowMs: options.batchWindowMs ?? 0,
      sendOne,
      async sendBatch(requests) {
        const batch = batchCall(requests, skewToleranceMs);
        const decided = await call(batch, (reply) => batch.read(reply));
        // A request whose counter failed gets its error; the others their decisions.
        return decided.map((one) => (one instanceof Error ? classify(one) : one));
      },
    });
  return (slot, checks, nowMs) => {
    let batcher = batchers.get(slot);
    if (batcher === undefined) {
      batcher = { decide: create(), pending: 0 };
      batchers.set(slot, batcher);
    }
    const own = batcher;
    own.pending += 1;
    const settled = () => {
      own.pending -= 1;
      if (own.pending === 0 && batchers.get(slot) === own) batchers.delete(slot);
    };
    const decided = own.decide(checks, nowMs);
    decided.then(settled, settled);
    return decided;
  };
}

type OneSlotBatcher = ReturnType<typeof createBatcher>;

/**
 * A request whose counters share a slot is one call, as on a single Redis, alone or batched with
 * others of its slot; others go per slot.
 */
function decideOnCluster(
  path: ClusterPath,
  checks: readonly CounterCheck[],
  nowMs: number | undefined,
): Promise<StoreDecision> {
  const groups = bySlot(checks.map((check) => check.key));
  const [only] = groups;
  if (groups.length === 1 && only !== undefined) return path.oneSlot(only.slot, checks, nowMs);
  return decideAcrossSlots(
    path,
    checks,
    groups.map((group) => group.indexes),
    nowMs,
  );
}

/**
 * Every slot's counters in one call each, all at once; the request is allowed when every call
 * allowed and, with quota counters, one fit on some slot. Otherwise what was consumed is refunded.
 */
async function decideAcrossSlots(
  path: ClusterPath,
  checks: readonly CounterCheck[],
  groups: number[][],
  nowMs: number | undefined,
): Promise<StoreDecision> {
  const { classify, skewToleranceMs } = path;
  const calls = await Promise.allSettled(
    groups.map((group) => {
      const part = group.map((index) => checks[index] as CounterCheck);
      const args = decideArgs(part, { nowMs, skewToleranceMs }, true);
      return path.call({ script: 'decision', args }, (reply) =>
        readPartDecision(reply, part.length),
      );
    }),
  );
  const results = new Array<CounterResult>(checks.length);
  let failure: StoreError | undefined;
  let allowed = true;
  let quotas = 0;
  let quotaFits = false;
  calls.forEach((settled, g) => {
    if (settled.status === 'rejected') {
      failure ??= classify(settled.reason);
      return;
    }
    if (!settled.value.allowed) allowed = false;
    (groups[g] as number[]).forEach((index, i) => {
      const check = checks[index] as CounterCheck;
      const result = settled.value.results[i] as CounterResult;
      results[index] = result;
      if (check.quota && !check.shadow) {
        quotas += 1;
        if (result.fits) quotaFits = true;
      }
    });
  });
  allowed &&= quotas === 0 || quotaFits;
  if (failure === undefined && allowed) return { allowed, results };

  refundConsumed(path.refunds, checks, groups, calls, results);
  if (failure !== undefined) throw failure;
  return { allowed: false, results };
}

/**
 * The request was denied or failed: the calls that allowed their slot's counters are refunded,
 * and those counters' results become what a denial reports, as if never consumed.
 */
function refundConsumed(
  refunds: Refunds,
  checks: readonly CounterCheck[],
  groups: number[][],
  calls: PromiseSettledResult<CallDecision>[],
  results: CounterResult[],
): void {
  calls.forEach((settled, g) => {
    if (settled.status === 'rejected' || !settled.value.allowed) return;
    const decision: CallDecision = settled.value;
    const back: CounterCheck[] = [];
    (groups[g] as number[]).forEach((index, i) => {
      const check = checks[index] as CounterCheck;
      if (!refundable(check, decision.results[i] as CounterResult)) return;
      back.push(check);
      results[index] = decision.kept[i] as CounterResult;
    });
    if (back.length > 0) refunds.send(back, decision.atMs);
  });
}

/** Runs `each` on every slot's keys at once, and adds up what they count. */
async function countPerSlot(
  keys: readonly string[],
  each: (group: string[]) => Promise<number>,
  classify: (error: unknown) => StoreError,
): Promise<number> {
  const counts = await Promise.all(
    bySlot(keys).map(async ({ indexes }) => {
      try {
        return await each(indexes.map((index) => keys[index] as string));
      } catch (error) {
        throw classify(error);
      }
    }),
  );
  return counts.reduce((sum, count) => sum + count, 0);
}

/** The indexes of `keys`, grouped by cluster slot, in order of first appearance. */
function bySlot(keys: readonly string[]): { slot: number; indexes: number[] }[] {
  const first = keys.length > 0 ? keySlot(keys[0] as string) : 0;
  let groups: Map<number, number[]> | undefined;
  for (let index = 1; index < keys.length; index++) {
    const slot = keySlot(keys[index] as string);
    if (groups === undefined) {
      if (slot === first) continue;
      groups = new Map([[first, Array.from({ length: index }, (_, i) => i)]]);
    }
    const group = groups.get(slot);
    if (group) group.push(index);
    else groups.set(slot, [index]);
  }
  if (groups === undefined) return [{ slot: first, indexes: keys.map((_, index) => index) }];
  return [...groups].map(([slot, indexes]) => ({ slot, indexes }));
}
