import type { StoreError } from '../errors.js';
import type { CounterCheck, CounterResult, Store, StoreDecision } from './Store.js';
import {
  decideArgs,
  decideCall,
  readDecision,
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
 * script call, exactly as on a single Redis.
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
}

export function createClusterStore(backend: SlotBackend, options: ClusterStoreOptions): Store {
  const { timeoutMs, classify } = options;
  const skewToleranceMs = options.clockSkewToleranceMs;
  const refunds = new Set<Promise<void>>();

  async function call<T>(script: ScriptCall, read: (reply: unknown) => T): Promise<T> {
    try {
      return read(await withDeadline(backend.run(script), timeoutMs));
    } catch (error) {
      throw classify(error);
    }
  }

  function refund(checks: CounterCheck[], atMs: number): void {
    const sent: Promise<void> = call(
      { script: 'decision', args: refundArgs(checks, atMs) },
      () => undefined,
    )
      .catch((error: StoreError) => options.onError?.(error))
      .finally(() => refunds.delete(sent));
    refunds.add(sent);
  }

  async function decideAcrossSlots(
    checks: readonly CounterCheck[],
    groups: number[][],
    nowMs: number | undefined,
  ): Promise<StoreDecision> {
    const calls = await Promise.allSettled(
      groups.map((group) => {
        const part = group.map((index) => checks[index] as CounterCheck);
        const args = decideArgs(part, { nowMs, skewToleranceMs }, true);
        return call({ script: 'decision', args }, (reply) => readPartDecision(reply, part.length));
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

    calls.forEach((settled, g) => {
      if (settled.status === 'rejected' || !settled.value.allowed) return;
      const decision: CallDecision = settled.value;
      const back: CounterCheck[] = [];
      (groups[g] as number[]).forEach((index, i) => {
        const check = checks[index] as CounterCheck;
        if (!refundable(check, decision.results[i] as CounterResult)) return;
        back.push(check);
        // What the counter reports on a denial: as if never consumed.
        results[index] = decision.kept[i] as CounterResult;
      });
      if (back.length > 0) refund(back, decision.atMs);
    });
    if (failure !== undefined) throw failure;
    return { allowed: false, results };
  }

  /** Runs `each` on every slot's keys at once, and adds up what they count. */
  const perSlot = async (keys: readonly string[], each: (group: string[]) => Promise<number>) => {
    const counts = await Promise.all(
      bySlot(keys).map(async (group) => {
        try {
          return await each(group.map((index) => keys[index] as string));
        } catch (error) {
          throw classify(error);
        }
      }),
    );
    return counts.reduce((sum, count) => sum + count, 0);
  };

  return {
    async decide(checks, nowMs) {
      const groups = bySlot(checks.map((check) => check.key));
      if (groups.length === 1) {
        return call(decideCall(checks, { nowMs, skewToleranceMs }), (reply) =>
          readDecision(reply, checks.length),
        );
      }
      return decideAcrossSlots(checks, groups, nowMs);
    },

    async reset(keys) {
      return perSlot(keys, (group) => backend.del(group));
    },

    async exists(keys) {
      return perSlot(keys, (group) => backend.exists(group));
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
      await Promise.allSettled([...refunds]);
      await backend.close();
    },
  };
}

/** The indexes of `keys`, grouped by cluster slot, in order of first appearance. */
function bySlot(keys: readonly string[]): number[][] {
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
  return groups ? [...groups.values()] : [keys.map((_, index) => index)];
}
