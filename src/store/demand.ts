/**
 * Where RLQS demand lives: per pool (a rule's counter), each consumer's recent demand with a TTL,
 * so that every worker and every instance of tollgate splits a pool over the same clients. In
 * Redis it is one hash per pool, beside the pool's counter, updated and read by one script call
 * (lua/demand.lua) on the store's own connection; in memory it is a map, for one process.
 */
import { readFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import type { RedisAccess } from './redisStore.js';

export interface PoolDemand {
  /** The sum of every live consumer's demand, this one's included. */
  totalDemand: number;
  /** Live consumers, this one included. */
  consumers: number;
  /** false: the pool was full and this consumer new, so it is in neither count. */
  recorded: boolean;
}

export interface DemandStore {
  /**
   * Records `consumer`'s demand on `pool` for `ttlMs`, and resolves with the pool's live demand.
   * A pool holds at most `maxConsumers`; a new consumer past that is not recorded (and not
   * counted). `nowMs` as for the store's decisions: undefined takes the backend's clock.
   */
  record(
    pool: string,
    consumer: string,
    demand: number,
    ttlMs: number,
    nowMs: number | undefined,
  ): Promise<PoolDemand>;
  /** Drops `consumer` from `pool` (its stream closed), so the others' shares grow at once. */
  forget(pool: string, consumer: string): Promise<void>;
}

export interface DemandOptions {
  maxConsumers: number;
}

interface Entry {
  demand: number;
  expiresAt: number;
}

export function createMemoryDemand(
  options: DemandOptions,
  clock: () => number = Date.now,
): DemandStore & { pools(): number } {
  const pools = new Map<string, { consumers: Map<string, Entry>; expiresAt: number }>();
  // Expired pools are dropped at most once a second, not on every report.
  let sweptAt = -Infinity;
  return {
    async record(pool, consumer, demand, ttlMs, nowMs) {
      const now = nowMs ?? clock();
      if (now - sweptAt >= 1000) {
        sweptAt = now;
        for (const [name, held] of pools) if (held.expiresAt <= now) pools.delete(name);
      }
      let held = pools.get(pool);
      if (held === undefined) {
        held = { consumers: new Map(), expiresAt: 0 };
        pools.set(pool, held);
      }
      let total = 0;
      let last = now + ttlMs;
      for (const [name, entry] of held.consumers) {
        if (name === consumer) continue;
        if (entry.expiresAt <= now) held.consumers.delete(name);
        else {
          total += entry.demand;
          last = Math.max(last, entry.expiresAt);
        }
      }
      const others = held.consumers.size - (held.consumers.has(consumer) ? 1 : 0);
      let consumers = others;
      const recorded = held.consumers.has(consumer) || others < options.maxConsumers;
      if (recorded) {
        held.consumers.set(consumer, { demand, expiresAt: now + ttlMs });
        consumers += 1;
        total += demand;
      }
      // The pool lives as long as its longest-lived consumer.
      held.expiresAt = last;
      return { totalDemand: total, consumers, recorded };
    },
    async forget(pool, consumer) {
      pools.get(pool)?.consumers.delete(consumer);
    },
    pools: () => pools.size,
  };
}

export function loadDemandScript(): string {
  return readFileSync(fileURLToPath(new URL('../../lua/demand.lua', import.meta.url)), 'utf8');
}

type DemandCommand = (key: string, ...args: string[]) => Promise<[string, string, string]>;

/**
 * The demand store on the store's Redis connection (single, Sentinel's master, or a cluster):
 * bounded by REDIS_TIMEOUT, failing with StoreError, as a check is.
 */
export function createRedisDemand(redis: RedisAccess, options: DemandOptions): DemandStore {
  redis.connection.defineCommand('tollgateDemand', { lua: loadDemandScript(), numberOfKeys: 1 });
  return {
    async record(pool, consumer, demand, ttlMs, nowMs) {
      const [total, live, recorded] = await redis.call((connection) =>
        (connection as unknown as { tollgateDemand: DemandCommand }).tollgateDemand(
          pool,
          consumer,
          String(demand),
          String(Math.max(1, Math.ceil(ttlMs))),
          nowMs === undefined ? '' : String(Math.floor(nowMs)),
          String(options.maxConsumers),
        ),
      );
      return { totalDemand: Number(total), consumers: Number(live), recorded: recorded === '1' };
    },
    async forget(pool, consumer) {
      await redis.call((connection) => connection.hdel(pool, consumer));
    },
  };
}
