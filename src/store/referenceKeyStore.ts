import { StoreError } from '../core/errors.js';
import { GIVEN_BACK_CHANNEL } from './invalidation.js';
import type { Cluster, Redis } from 'ioredis';
import type { RedisAccess, RedisStore } from './redisStore.js';
import type { CounterCheck, CounterResult, Store, StoreDecision } from './Store.js';

/**
 * COMPAT_KEYS=reference: the counters are envoyproxy/ratelimit's own, so that it and tollgate
 * can serve one fleet at once, during a cut-over, without a count lost or doubled. Each counter
 * is a plain integer under the reference's key for its descriptor and window (keys.ts's
 * `referenceKey`, with the window's start on the instance's clock), written by the commands the
 * reference sends: `INCRBY` by the descriptor's hits, then `EXPIRE` by the window plus up to
 * EXPIRATION_JITTER_MAX_SECONDS at random. The count after the `INCRBY` decides, as in the
 * reference: within the limit while it is at most the limit (ReferenceCounting).
 *
 * What that gives up, against tollgate's own counters (docs/decisions.md):
 * - A request is not one atomic step: each key is its own command. Every answer is still the
 *   one the reference would give, since each depends only on its own key's `INCRBY`.
 * - With STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT the counts are read first (`GET`), then
 *   incremented: two round trips, and another call may land between them, as in the reference.
 * - No hash tag: on Redis Cluster each key is a call of its own, to its own slot.
 * - The window follows the instance's clock, not Redis's.
 *
 * A refund (`giveBack`) is the reference's own (its is_negative_hits change): the count goes down
 * by the hits, never below 0, a key that does not exist is not made, and the key is published on
 * GIVEN_BACK_CHANNEL for the caches of the other processes (invalidation.ts).
 */
export interface ReferenceKeyStoreOptions {
  /** The Redis store the commands go through: its connection, deadline and error mapping. */
  redis: RedisStore;
  /** EXPIRATION_JITTER_MAX_SECONDS: 0 for none. */
  jitterMaxSeconds: number;
  /** The health probe's key: a plain counter that no descriptor's key can equal. */
  probeKey: string;
  /** [0, 1): the jitter's draw. */
  random?: () => number;
}

/**
 * The reference's refund, as one step on its key: the count less the hits, floored at 0; a
 * missing key stays missing (-1). The window's TTL is set again, as the reference's script does.
 */
const REFUND = `
local current = redis.call('GET', KEYS[1])
if current == false then return -1 end
local hits = tonumber(ARGV[1])
local count = tonumber(current)
if count == nil then return redis.error_reply('WRONGTYPE the key holds no count') end
if hits > 0 and count > 0 then
  count = math.max(0, count - hits)
  redis.call('SET', KEYS[1], count)
  redis.call('EXPIRE', KEYS[1], tonumber(ARGV[2]))
end
if hits > 0 then redis.pcall('PUBLISH', ARGV[3], ARGV[4]) end
return count
`;

export function createReferenceKeyStore(options: ReferenceKeyStoreOptions): Store {
  const { redis, jitterMaxSeconds, probeKey } = options;
  const random = options.random ?? Math.random;
  const ttl = (windowMs: number) =>
    windowMs / 1000 + (jitterMaxSeconds > 0 ? Math.floor(random() * jitterMaxSeconds) : 0);
  return {
    async decide(counters, nowMs) {
      const now = nowMs ?? Date.now();
      for (const counter of counters) refuseForeign(counter);
      const keys = counters.map((counter) => counter.key);
      const before = stopping(counters) ? await counts(redis.access, keys, counters) : undefined;
      const near = before && counters.map((counter, i) => isNear(counter, before[i] ?? 0));
      const nearAny = near?.some(Boolean) ?? false;
      const steps = counters.map((counter, i): Step | undefined => {
        const key = keys[i] as string;
        const reference = counter.reference;
        const expiry = ttl(counter.windowMs);
        if (counter.giveBack) return { kind: 'refund', key, hits: counter.cost, ttl: expiry };
        if (reference === undefined || reference.cached) return undefined;
        const held = reference.stop && (reference.held || (nearAny && near?.[i] !== true));
        return { kind: 'count', key, hits: held ? 0 : counter.cost, ttl: expiry };
      });
      const after = await redis.access.call((connection) => run(connection, steps));
      return decisionOf(counters, after, now);
    },
    // The operator's commands name whole keys, window included (cli/counters.ts).
    reset: (keys) => redis.reset(keys),
    exists: (keys) => redis.exists(keys),
    ping: () => redis.ping(),
    async probe() {
      // The path a check takes, on a key of its own; on a cluster every master answers too, since
      // a check's keys may be on any of them.
      await redis.access.call(async (connection) => {
        await connection.incrby(probeKey, 0);
        await connection.expire(probeKey, 60);
        if (connection.isCluster) {
          const masters = (connection as Cluster).nodes('master');
          await Promise.all(masters.map((node) => node.ping()));
        }
      });
    },
    close: () => redis.close(),
  };
}

/** What one counter sends: its count (`INCRBY`, `EXPIRE`) or its refund (REFUND). */
interface Step {
  kind: 'count' | 'refund';
  key: string;
  hits: number;
  ttl: number;
}

/**
 * Sends the steps, in order, and resolves with each one's count after it (undefined for a step
 * not sent). On one Redis they go as one pipeline, one write for the request, as the reference
 * sends them; on a cluster each key's commands go to its own node, all at once.
 */
async function run(
  connection: Redis | Cluster,
  steps: readonly (Step | undefined)[],
): Promise<(number | undefined)[]> {
  if (connection.isCluster) {
    return Promise.all(
      steps.map(async (step) => {
        if (step === undefined) return undefined;
        if (step.kind === 'refund') return Number(await connection.eval(...refundArgs(step)));
        const [count] = await Promise.all([
          connection.incrby(step.key, step.hits),
          connection.expire(step.key, step.ttl),
        ]);
        return count;
      }),
    );
  }
  const pipeline = connection.pipeline();
  const places: (number | undefined)[] = [];
  for (const step of steps) {
    if (step === undefined) {
      places.push(undefined);
    } else if (step.kind === 'refund') {
      places.push(pipeline.length);
      pipeline.eval(...refundArgs(step));
    } else {
      places.push(pipeline.length);
      pipeline.incrby(step.key, step.hits).expire(step.key, step.ttl);
    }
  }
  const replies = (await pipeline.exec()) ?? [];
  for (const [error] of replies) if (error) throw error;
  return places.map((at) => (at === undefined ? undefined : Number(replies[at]?.[1])));
}

/** EVAL's arguments for a refund: the key, the hits, the TTL, and where to publish the key. */
const refundArgs = (step: Step) =>
  [REFUND, 1, step.key, step.hits, step.ttl, GIVEN_BACK_CHANNEL, step.key] as const;

/** Only the reference's counting of fixed windows has the reference's keys. */
function refuseForeign(counter: CounterCheck): void {
  if (counter.algorithm === 'fixed_window' && counter.reference !== undefined) return;
  throw new StoreError(
    `COMPAT_KEYS=reference counts only the reference's fixed windows, not a ${counter.algorithm} counted as tollgate counts`,
    'script',
  );
}

/** STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT with nothing held: the counts are read first. */
function stopping(counters: readonly CounterCheck[]): boolean {
  return counters.some(
    ({ reference, giveBack }) =>
      reference?.stop && !reference.held && !reference.cached && !giveBack,
  );
}

/** Whether a counter's hits would take it past its limit: only those are counted, then. */
function isNear(counter: CounterCheck, count: number): boolean {
  const reference = counter.reference;
  if (!reference?.stop || reference.cached || counter.giveBack) return false;
  return count + counter.cost > counter.limit;
}

/** Each key's count (0 when it does not exist). */
async function counts(
  access: RedisAccess,
  keys: readonly string[],
  counters: readonly CounterCheck[],
): Promise<number[]> {
  return access.call((connection) =>
    Promise.all(
      keys.map(async (key, i) =>
        counters[i]?.giveBack ? 0 : Number((await connection.get(key)) ?? 0),
      ),
    ),
  );
}

/**
 * The results as the reference counting reads them: `remaining` carries the count after the call
 * (see ReferenceCounting). A counter the local cache remembers over was not sent, and does not
 * fit. A refund always fits.
 */
function decisionOf(
  counters: readonly CounterCheck[],
  after: readonly (number | undefined)[],
  now: number,
): StoreDecision {
  const results = counters.map((counter, i): CounterResult => {
    const count = after[i];
    const resetMs = counter.windowMs - (now % counter.windowMs);
    if (counter.giveBack) return { fits: true, remaining: Math.max(0, count ?? 0), resetMs };
    if (count === undefined) return { fits: false, remaining: 0, resetMs };
    return { fits: count <= counter.limit, remaining: count, resetMs };
  });
  const gate = (want: (counter: CounterCheck) => boolean) =>
    counters.flatMap((counter, i) => (want(counter) ? [results[i]?.fits === true] : []));
  const enforced = gate((c) => !c.shadow && !c.quota && c.giveBack !== true);
  const quotas = gate((c) => !c.shadow && c.quota && c.giveBack !== true);
  const allowed = enforced.every(Boolean) && (quotas.length === 0 || quotas.some(Boolean));
  return { allowed, results };
}
