import type { CounterCheck, CounterResult, Store, StoreDecision } from './Store.js';
import {
  ALGORITHM_IMPLS,
  MAX_FIXED_COUNT,
  loadCalendarWindow,
  type CounterState,
  type Loaded,
} from './algorithms.js';
import { boundsAround } from '../rules/calendar.js';

/**
 * A store for one process, with the same decisions as Redis: the algorithms mirror `lua/`.
 * Used when REDIS_URL is unset. Counters expire as in Redis, and a sweep drops expired ones, so
 * memory holds only live counters.
 */
export interface MemoryStoreOptions {
  /** The store's clock when the caller passes no time (CLOCK=redis). */
  clock?: () => number;
  /** How often expired counters are dropped. */
  sweepIntervalMs?: number;
}

interface Slot {
  state: CounterState;
  expiresAt: number;
}

/** Every live counter by key; what `decide` reads and writes. */
type Counters = Map<string, Slot>;

export function createMemoryStore(options: MemoryStoreOptions = {}): Store & { size(): number } {
  const clock = options.clock ?? Date.now;
  const counters: Counters = new Map();
  const sweep = startSweep(counters, clock, options.sweepIntervalMs ?? 10_000);

  return {
    async decide(
      checks: readonly CounterCheck[],
      nowMs: number | undefined,
    ): Promise<StoreDecision> {
      return decideInMemory(counters, checks, nowMs ?? clock());
    },

    async reset(keys: readonly string[]) {
      let existed = 0;
      for (const key of keys) if (counters.delete(key)) existed += 1;
      return existed;
    },

    async exists(keys: readonly string[]) {
      let found = 0;
      for (const key of keys) if (counters.has(key)) found += 1;
      return found;
    },

    async ping() {},

    async probe() {},

    async close() {
      clearInterval(sweep);
      counters.clear();
    },

    size: () => counters.size,
  };
}

/** Drops expired counters every `intervalMs`, without holding the process open. */
function startSweep(counters: Counters, clock: () => number, intervalMs: number): NodeJS.Timeout {
  const sweep = setInterval(() => {
    const now = clock();
    for (const [key, slot] of counters) if (slot.expiresAt <= now) counters.delete(key);
  }, intervalMs);
  sweep.unref();
  return sweep;
}

/**
 * One request decided as lua/dispatch.lua decides it: load every counter and judge whether it
 * fits, count the reference counters, gate the request, then settle each counter.
 */
function decideInMemory(
  counters: Counters,
  checks: readonly CounterCheck[],
  now: number,
): StoreDecision {
  const states: Loaded[] = [];
  const verdicts: (boolean | undefined)[] = [];
  for (const check of checks) {
    const algorithm = ALGORITHM_IMPLS[check.algorithm];
    const state = load(counters, check, now);
    states.push(state);
    verdicts.push(
      check.reference
        ? undefined
        : algorithm.fits(state, check.limit, check.burst, Math.max(check.cost, 1)),
    );
  }
  const counts = countAsReference(counters, checks, states, verdicts);
  const allowed = isAllowed(checks, verdicts);
  const results = checks.map((check, i) => {
    const state = states[i] as Loaded;
    // Given back below, once every charge is settled.
    if (check.giveBack && !check.reference) return GIVEN_LATER;
    if (!check.reference) return settle(counters, check, state, verdicts[i], allowed);
    const count = counts?.get(i) as number;
    return { fits: verdicts[i] === true, remaining: count, resetMs: state.window - state.e };
  });
  if (checks.some((check) => check.giveBack && !check.reference)) {
    giveBackAll(counters, checks, now, results);
  }
  return { allowed, results };
}

const GIVEN_LATER: CounterResult = { fits: true, remaining: 0, resetMs: 0 };

/**
 * lua/dispatch.lua's give_back_all: gives back every give-back counter, in order, once the
 * request's charges are settled, and puts its result in `results`.
 */
function giveBackAll(
  counters: Counters,
  checks: readonly CounterCheck[],
  now: number,
  results: CounterResult[],
): void {
  checks.forEach((check, i) => {
    // A reference counter gives back in its place among the reference's counts.
    if (!check.giveBack || check.reference) return;
    const algorithm = ALGORITHM_IMPLS[check.algorithm];
    const state = load(counters, check, now);
    const settled = algorithm.giveBack(state, check.limit, check.burst, check.cost);
    if (settled.write) {
      counters.set(check.key, { state: settled.write, expiresAt: state.now + (settled.ttl ?? 0) });
    }
    results[i] = { fits: true, remaining: settled.remaining, resetMs: settled.reset };
  });
}

/** Consumes what the gate allows of one counter, and answers its result. */
function settle(
  counters: Counters,
  check: CounterCheck,
  state: Loaded,
  fits: boolean | undefined,
  allowed: boolean,
): CounterResult {
  let commit = check.shadow ? fits === true : check.quota ? allowed && fits === true : allowed;
  if (check.overdraw) commit = true;
  const settled = ALGORITHM_IMPLS[check.algorithm].settle(
    state,
    check.limit,
    check.cost,
    fits,
    commit,
    check.deepDebt,
  );
  if (settled.write) {
    // Lifetimes count from the counter's own time, which never runs backwards.
    const expiresAt = state.now + (settled.ttl ?? 0);
    counters.set(check.key, { state: settled.write, expiresAt });
  }
  const result: CounterResult = {
    fits: fits === true,
    remaining: settled.remaining,
    resetMs: settled.reset,
  };
  if (check.overdraw && settled.past) result.past = settled.past;
  return result;
}

/** The all-or-nothing gate (see Store.ts): every enforced counter fits, and a quota one if any. */
function isAllowed(
  checks: readonly CounterCheck[],
  verdicts: readonly (boolean | undefined)[],
): boolean {
  let enforced = true;
  let quotas = 0;
  let quotaFits = false;
  for (const [i, check] of checks.entries()) {
    const fits = verdicts[i];
    if (check.shadow || check.giveBack) continue;
    if (check.quota) {
      quotas += 1;
      if (fits) quotaFits = true;
    } else if (!fits) {
      enforced = false;
    }
  }
  return enforced && (quotas === 0 || quotaFits);
}

/** A counter's state as its algorithm loads it at `now`: a calendar window's between its bounds. */
function load(counters: Counters, check: CounterCheck, now: number): Loaded {
  const stored = read(counters, check.key, now);
  if (check.calendar) {
    return loadCalendarWindow(stored, now, check.bounds ?? boundsAround(check.calendar, now));
  }
  return ALGORITHM_IMPLS[check.algorithm].load(stored, now, check.windowMs);
}

/** A live counter's state, or undefined when there is none; an expired one is dropped. */
function read(counters: Counters, key: string, now: number): CounterState | undefined {
  const slot = counters.get(key);
  if (slot === undefined) return undefined;
  if (slot.expiresAt <= now) {
    counters.delete(key);
    return undefined;
  }
  return slot.state;
}

/** lua/dispatch.lua's count_as_reference: settles the reference counters, in order. */
function countAsReference(
  counters: Counters,
  checks: readonly CounterCheck[],
  states: readonly Loaded[],
  verdicts: (boolean | undefined)[],
): Map<number, number> | undefined {
  if (!checks.some((check) => check.reference)) return undefined;
  const counts = new Map<number, number>();
  const near = checks.map((check, i) => {
    const counting = check.reference;
    if (!counting?.stop || counting.cached || check.giveBack) return false;
    return (states[i] as Loaded).c + check.cost > check.limit;
  });
  const nearAny = near.includes(true);
  const live = new Map<string, Loaded>();
  for (const [i, check] of checks.entries()) {
    const counting = check.reference;
    if (counting === undefined) continue;
    const state = live.get(check.key) ?? (states[i] as Loaded);
    live.set(check.key, state);
    if (check.giveBack) {
      if (check.cost > 0 && state.c > 0) {
        state.c = Math.max(0, state.c - check.cost);
        const slot = counters.get(check.key) as { expiresAt: number };
        counters.set(check.key, {
          state: { t: state.now, w: state.index, c: state.c },
          expiresAt: slot.expiresAt,
        });
      }
      verdicts[i] = true;
      counts.set(i, state.c);
      continue;
    }
    if (counting.cached) {
      verdicts[i] = false;
      counts.set(i, state.c);
      continue;
    }
    const held = counting.stop && (counting.held || (nearAny && !near[i]));
    const add = held ? 0 : check.cost;
    if (add > 0) {
      state.c = Math.min(state.c + add, MAX_FIXED_COUNT);
      const rest = state.window - state.e;
      counters.set(check.key, {
        state: { t: state.now, w: state.index, c: state.c },
        expiresAt: state.now + rest,
      });
    }
    verdicts[i] = state.c <= check.limit;
    counts.set(i, state.c);
  }
  return counts;
}
