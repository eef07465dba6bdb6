import { NEVER, type CounterCheck, type CounterResult } from './Store.js';

/**
 * Counters the store denied, remembered until they may fit again, so that a tenant hammering a
 * spent limit is answered from memory instead of costing a store round trip each time.
 *
 * An entry holds, for one counter key under one rules version, the smallest cost the store denied
 * and a deadline. It answers "denied" only for a cost at least that large, before the deadline.
 * That never denies what the store would allow, because every check of a remembered counter is
 * monotone until its reset:
 * - Other traffic only consumes: a window's counts only grow (an overdraw adds, it never
 *   lowers them), whatever limit the other checks carry, and denying writes nothing. A give-back
 *   (is_negative_hits) lowers them: it takes its counter out of the cache here, and out of every
 *   other process's (see invalidation.ts).
 * - Time only frees, and the store's reset is the first moment the denied cost fits when nothing
 *   else consumes. A larger cost or a lower limit fits no sooner. A key's TTL depends on its
 *   window only, so it never expires before that moment either.
 * - Denying consumes nothing, so answering a denial from memory leaves the store as it would be.
 *   (Redis Cluster breaks the first point: it refunds the other slots of a denied request that
 *   spans slots, so the service turns the cache off there.)
 * Hence what is remembered: enforced counters only (a shadow counter never denies, a quota counter
 * denies only with the others, an overdraw counter is consumed even when denied), with a finite
 * reset, and no token bucket. A bucket refills at the rate of whichever check reads it and expires
 * on the TTL its last writer computed, so a limit override of the same window, or a reload, with
 * another rate can free it before the reset a denial reported.
 *
 * The deadline is the cache clock read before the store call plus the reset: the reset runs from
 * the moment the store decided, which is no earlier. A reload may change limits, so entries belong
 * to the rules object they were learnt under, and a new one empties the cache.
 *
 * Bounded: a Map in insertion order is the LRU, touched on a hit and trimmed from its oldest end.
 * A miss allocates nothing.
 */
export interface OverLimitCache {
  /** Forgets everything when `rules` is not the rules object the entries were learnt under. */
  sync(rules: object): void;
  /** The deadline before which this counter certainly denies its cost, or undefined. */
  deniedUntil(counter: CounterCheck, now: number): number | undefined;
  /** Learns from the store's result for a counter, decided under `rules` with the clock at `now`. */
  learn(rules: object, counter: CounterCheck, result: CounterResult, now: number): void;
  /** Forgets a counter: something was given back to it (is_negative_hits). */
  forget(key: string): void;
  /** Forgets every counter. */
  clear(): void;
  readonly size: number;
}

interface Entry {
  /** The smallest cost denied, at least 1 (a check-only 0 needs one unit). */
  cost: number;
  deadline: number;
  limit: number;
}

/** Whether a denial of this counter may be remembered (see above). */
export function cacheable(counter: CounterCheck): boolean {
  return (
    !counter.shadow &&
    !counter.quota &&
    !counter.overdraw &&
    counter.giveBack !== true &&
    counter.algorithm !== 'token_bucket'
  );
}

/** An entry speaks for a check with no higher limit. */
function covers(entry: Entry, counter: CounterCheck): boolean {
  return counter.limit <= entry.limit;
}

export function createOverLimitCache(maxEntries: number): OverLimitCache {
  const entries = new Map<string, Entry>();
  let version: object | undefined;

  return {
    sync(rules) {
      if (rules === version) return;
      version = rules;
      entries.clear();
    },

    deniedUntil(counter, now) {
      const entry = entries.get(counter.key);
      if (entry === undefined) return undefined;
      if (entry.deadline <= now) {
        entries.delete(counter.key);
        return undefined;
      }
      const need = Math.max(counter.cost, 1);
      // A cost above the limit never fits: the store says so with no reset, which an entry's
      // deadline cannot.
      if (need < entry.cost || need > counter.limit || !covers(entry, counter)) return undefined;
      if (!cacheable(counter)) return undefined;
      entries.delete(counter.key);
      entries.set(counter.key, entry);
      return entry.deadline;
    },

    learn(rules, counter, result, now) {
      if (counter.giveBack === true) {
        entries.delete(counter.key);
        return;
      }
      if (rules !== version || !cacheable(counter)) return;
      const cost = Math.max(counter.cost, 1);
      const entry = entries.get(counter.key);
      if (result.fits) {
        // Only a reset behind the store's back (an operator's) lets a remembered cost fit early.
        if (entry !== undefined && cost >= entry.cost && covers(entry, counter)) {
          entries.delete(counter.key);
        }
        return;
      }
      if (result.resetMs === NEVER) return;
      const deadline = now + result.resetMs;
      if (
        entry === undefined ||
        entry.deadline <= now ||
        entry.limit !== counter.limit ||
        cost < entry.cost
      ) {
        // A smaller cost is denied until its own deadline, which may be sooner: replace both.
        entries.delete(counter.key);
        entries.set(counter.key, { cost, deadline, limit: counter.limit });
        if (entries.size > maxEntries) entries.delete(entries.keys().next().value as string);
      } else if (cost === entry.cost && deadline > entry.deadline) {
        entry.deadline = deadline;
      }
    },

    forget(key) {
      entries.delete(key);
    },

    clear() {
      entries.clear();
    },

    get size() {
      return entries.size;
    },
  };
}

/**
 * COMPAT_MODE=reference: the reference's local cache. A key found over is remembered until its
 * window ends, whatever the cost of later checks, and those checks are answered from memory.
 * Bounded as above, and emptied by a reload. It counts what the reference's cache library
 * (freecache) counts, for the reference's `ratelimit.localcache.*` gauges (see `stats`).
 */
export interface KeyCache {
  sync(rules: object): void;
  /** The deadline while `key` is remembered over, or undefined: one lookup, a hit or a miss. */
  until(key: string, now: number): number | undefined;
  remember(key: string, deadline: number): void;
  /** Forgets a key: something was given back to it (is_negative_hits). */
  forget(key: string): void;
  /** Forgets every key. */
  clear(): void;
  readonly size: number;
  stats(): LocalCacheStats;
}

/** The reference's local-cache gauges, with freecache's meanings. */
export interface LocalCacheStats {
  /** Lookups that found a key remembered. */
  hitCount: number;
  /** Lookups that found none, or one past its deadline (which is then dropped). */
  missCount: number;
  lookupCount: number;
  /** Keys remembered now. */
  entryCount: number;
  /** Keys dropped for room, before their deadline. */
  evacuateCount: number;
  /** Keys found past their deadline. */
  expiredCount: number;
  /** Keys remembered again while still remembered. */
  overwriteCount: number;
  /** The mean of the keys' last access, set or hit, in Unix seconds; 0 with no key. */
  averageAccessTime: number;
}

interface Remembered {
  deadline: number;
  /** Unix seconds of its last set or hit. */
  accessed: number;
}

export function createKeyCache(maxEntries: number): KeyCache {
  const entries = new Map<string, Remembered>();
  let version: object | undefined;
  const counts = { hit: 0, miss: 0, evacuated: 0, expired: 0, overwritten: 0 };
  /** The sum of every entry's `accessed`, kept as entries come, go and are touched. */
  let accessSum = 0;
  const unixSeconds = () => Math.floor(Date.now() / 1000);
  const drop = (key: string, entry: Remembered) => {
    entries.delete(key);
    accessSum -= entry.accessed;
  };
  return {
    sync(rules) {
      if (rules === version) return;
      version = rules;
      entries.clear();
      accessSum = 0;
    },
    until(key, now) {
      const entry = entries.get(key);
      if (entry === undefined) {
        counts.miss++;
        return undefined;
      }
      if (entry.deadline <= now) {
        drop(key, entry);
        counts.expired++;
        counts.miss++;
        return undefined;
      }
      counts.hit++;
      const at = unixSeconds();
      accessSum += at - entry.accessed;
      entry.accessed = at;
      return entry.deadline;
    },
    remember(key, deadline) {
      const known = entries.get(key);
      if (known !== undefined) {
        counts.overwritten++;
        drop(key, known);
      }
      const entry = { deadline, accessed: unixSeconds() };
      entries.set(key, entry);
      accessSum += entry.accessed;
      if (entries.size > maxEntries) {
        const [oldest, old] = entries.entries().next().value as [string, Remembered];
        drop(oldest, old);
        counts.evacuated++;
      }
    },
    forget(key) {
      const known = entries.get(key);
      if (known !== undefined) drop(key, known);
    },
    clear() {
      entries.clear();
      accessSum = 0;
    },
    get size() {
      return entries.size;
    },
    stats: () => ({
      hitCount: counts.hit,
      missCount: counts.miss,
      lookupCount: counts.hit + counts.miss,
      entryCount: entries.size,
      evacuateCount: counts.evacuated,
      expiredCount: counts.expired,
      overwriteCount: counts.overwritten,
      averageAccessTime: entries.size === 0 ? 0 : Math.floor(accessSum / entries.size),
    }),
  };
}
