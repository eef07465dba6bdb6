/**
 * Where RLQS demand lives: per pool (a rule's counter), each consumer's recent demand with a TTL,
 * so that every worker and every instance of tollgate splits a pool over the same clients. In
 * Redis it is one hash per pool, updated and read by one script call (lua/demand.lua); in memory
 * it is a map, for one process.
 */
import { readFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import type { Cluster, Redis } from 'ioredis';

export interface PoolDemand {
  /** The sum of every live consumer's demand, this one's included. */
  totalDemand: number;
  /** Live consumers, this one included. */
  consumers: number;
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
      for (const [name, entry] of held.consumers) {
        if (name === consumer) continue;
        if (entry.expiresAt <= now) held.consumers.delete(name);
        else total += entry.demand;
      }
      const others = held.consumers.size - (held.consumers.has(consumer) ? 1 : 0);
      let consumers = others;
      if (held.consumers.has(consumer) || others < options.maxConsumers) {
        held.consumers.set(consumer, { demand, expiresAt: now + ttlMs });
        consumers += 1;
        total += demand;
      }
      held.expiresAt = now + ttlMs;
      return { totalDemand: total, consumers };
    },
    pools: () => pools.size,
  };
}

export function loadDemandScript(): string {
  return readFileSync(fileURLToPath(new URL('../../lua/demand.lua', import.meta.url)), 'utf8');
}

type DemandCommand = (key: string, ...args: string[]) => Promise<[string, string]>;

/** The demand store on a Redis connection (single, Sentinel's master, or a cluster). */
export function createRedisDemand(redis: Redis | Cluster, options: DemandOptions): DemandStore {
  redis.defineCommand('tollgateDemand', { lua: loadDemandScript(), numberOfKeys: 1 });
  const command = (redis as unknown as { tollgateDemand: DemandCommand }).tollgateDemand.bind(
    redis,
  );
  return {
    async record(pool, consumer, demand, ttlMs, nowMs) {
      const [total, live] = await command(
        pool,
        consumer,
        String(demand),
        String(Math.max(1, Math.ceil(ttlMs))),
        nowMs === undefined ? '' : String(Math.floor(nowMs)),
        String(options.maxConsumers),
      );
      return { totalDemand: Number(total), consumers: Number(live) };
    },
  };
}
