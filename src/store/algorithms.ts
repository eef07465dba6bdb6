import type { Algorithm } from '../rules/types.js';
import { DEEP_DEBT_MS } from './Store.js';

/**
 * The three algorithms of `lua/`, for the in-memory store. Each function here mirrors its Lua
 * twin line for line: same operations, same order, same rounding, so both stores give identical
 * decisions (a property test holds them to it). Read the Lua headers for the reasoning.
 */

/** A counter's stored fields; the names are the Redis hash fields. */
export interface CounterState {
  t?: number;
  w?: number;
  c?: number;
  p?: number;
  k?: number;
  s?: number;
}

export interface Loaded {
  now: number;
  window: number;
  index: number;
  e: number;
  c: number;
  p: number;
  // Token bucket only.
  t: number | undefined;
  k: number;
  s: number;
  scale: number;
  refill: number;
  full: number;
  tokens: number;
}

export interface AlgorithmImpl {
  load(stored: CounterState | undefined, now: number, window: number): Loaded;
  /** undefined: the cost can never fit. */
  fits(state: Loaded, limit: number, burst: number, need: number): boolean | undefined;
  /** Returns remaining, reset and, when it consumed, the state to store and its lifetime. */
  settle(
    state: Loaded,
    limit: number,
    cost: number,
    fits: boolean | undefined,
    commit: boolean,
    /** A deep overdraw (CounterCheck.deepDebt): a token bucket's debt may go deeper. */
    deep?: boolean,
  ): Settled;
  /** is_negative_hits: gives the cost back to the counter as it stands now (see its Lua twin). */
  giveBack(state: Loaded, limit: number, burst: number, cost: number): Settled;
}

/** Remaining, reset and, when it wrote, the state to store and its lifetime. */
export interface Settled {
  remaining: number;
  /** How far past its limit the counter is: a window's count past L, a token bucket's debt. */
  past?: number;
  reset: number;
  write?: CounterState;
  ttl?: number;
}

const SPLIT = 2 ** 20;
/** The most an overdraw records (lua/lib.lua): exact below 2^53, and below 2^33 where multiplied. */
export const MAX_FIXED_COUNT = 2 ** 52;
const MAX_SLIDING_COUNT = 2 ** 33 - 1;

export function productDifference(a: number, b: number, c: number, d: number): number {
  const bh = Math.floor(b / SPLIT);
  const bl = b % SPLIT;
  const dh = Math.floor(d / SPLIT);
  const dl = d % SPLIT;
  return (a * bh - c * dh) * SPLIT + (a * bl - c * dl);
}

export function mulDiv(a: number, b: number, c: number): [quotient: number, rest: number] {
  let q = Math.floor((a * b) / c);
  let r = q < c ? productDifference(a, b, q, c) : productDifference(a, b, c, q);
  while (r < 0) {
    q -= 1;
    r += c;
  }
  while (r >= c) {
    q += 1;
    r -= c;
  }
  return [q, r];
}

const ceilDiv = (a: number, b: number): number => Math.floor((a + b - 1) / b);

function gcd(a: number, b: number): number {
  while (b > 0) [a, b] = [b, a % b];
  return a;
}

function loadWindow(stored: CounterState | undefined, now: number, window: number): Loaded {
  if (stored?.t !== undefined && stored.t > now) now = stored.t;
  const index = Math.floor(now / window);
  let c = 0;
  let p = 0;
  if (stored?.w === index) {
    c = stored.c ?? 0;
    p = stored.p ?? 0;
  } else if (stored?.w === index - 1) {
    p = stored.c ?? 0;
  }
  return { ...EMPTY, now, window, index, e: now - index * window, c, p };
}

const EMPTY: Loaded = {
  now: 0,
  window: 0,
  index: 0,
  e: 0,
  c: 0,
  p: 0,
  t: undefined,
  k: 0,
  s: 0,
  scale: 0,
  refill: 0,
  full: 0,
  tokens: 0,
};

const fixedWindow: AlgorithmImpl = {
  load: loadWindow,
  fits: (s, limit, _burst, need) => (need > limit ? undefined : s.c + need <= limit),
  settle(s, limit, cost, fits, commit) {
    const rest = s.window - s.e;
    let write: CounterState | undefined;
    if (commit && cost > 0) {
      s.c = Math.min(s.c + cost, MAX_FIXED_COUNT);
      write = { t: s.now, w: s.index, c: s.c };
    }
    const reset = fits === undefined ? -1 : rest;
    const past = Math.max(0, s.c - limit);
    return { remaining: Math.max(0, limit - s.c), past, reset, write, ttl: rest };
  },
  giveBack(s, limit, _burst, cost) {
    const rest = s.window - s.e;
    let write: CounterState | undefined;
    if (cost > 0 && s.c > 0) {
      s.c = Math.max(0, s.c - cost);
      write = { t: s.now, w: s.index, c: s.c };
    }
    return { remaining: Math.max(0, limit - s.c), reset: rest, write, ttl: rest };
  },
};

const slidingWindow: AlgorithmImpl = {
  load: loadWindow,
  fits(s, limit, _burst, need) {
    if (need > limit) return undefined;
    const spare = limit - s.c - need;
    if (spare < 0) return false;
    return productDifference(s.p, s.window - s.e, spare, s.window) <= 0;
  },
  settle(s, limit, cost, fits, commit) {
    const W = s.window;
    const e = s.e;
    let write: CounterState | undefined;
    const [floor, rest] = mulDiv(s.p, W - e, W);
    const weighted = rest > 0 ? floor + 1 : floor;
    if (commit && cost > 0) {
      s.c = Math.min(s.c + cost, MAX_SLIDING_COUNT);
      write = { t: s.now, w: s.index, c: s.c, p: s.p };
    }
    const remaining = Math.max(0, limit - s.c - weighted);
    const past = Math.max(0, s.c + weighted - limit);

    const need = Math.max(cost, 1);
    let reset: number;
    if (fits === undefined) reset = -1;
    else if (fits) reset = s.c > 0 ? 2 * W - e : W - e;
    else if (s.c + need <= limit) reset = W - mulDiv(limit - s.c - need, W, s.p)[0] - e;
    else reset = W - e + Math.max(0, W - mulDiv(limit - need, W, s.c)[0]);
    return { remaining, past, reset, write, ttl: 2 * W - e };
  },
  giveBack(s, limit, burst, cost) {
    let write: CounterState | undefined;
    if (cost > 0 && s.c > 0) {
      s.c = Math.max(0, s.c - cost);
      write = { t: s.now, w: s.index, c: s.c, p: s.p };
    }
    return { ...slidingWindow.settle(s, limit, 0, true, false), write };
  },
};

const tokenBucket: AlgorithmImpl = {
  load(stored, now, window) {
    const t = stored?.t;
    if (t !== undefined && t > now) now = t;
    return { ...EMPTY, now, window, t, k: stored?.k ?? 0, s: stored?.s ?? 0 };
  },
  fits(st, limit, burst, need) {
    const g = gcd(limit, st.window);
    const scale = st.window / g;
    const refill = limit / g;
    const full = burst * scale;
    let tokens = full;
    if (st.t !== undefined) {
      tokens = st.k;
      if (st.s !== scale) tokens = Math.floor(tokens / st.s) * scale;
      const missing = full - tokens;
      if (missing <= 0 || (st.now - st.t) * refill >= missing) tokens = full;
      else tokens = tokens + (st.now - st.t) * refill;
    }
    Object.assign(st, { scale, refill, full, tokens });
    if (need > burst) return undefined;
    return tokens >= need * scale;
  },
  settle(st, _limit, cost, fits, commit, deep) {
    let write: CounterState | undefined;
    if (commit && cost > 0 && st.full > 0) {
      const floor = deep ? -st.full - DEEP_DEBT_MS * st.refill : -st.full;
      st.tokens = Math.max(floor, st.tokens - cost * st.scale);
      write = { t: st.now, k: st.tokens, s: st.scale };
    }
    let reset: number;
    if (fits === undefined) reset = -1;
    else if (fits) reset = ceilDiv(st.full - st.tokens, st.refill);
    else reset = ceilDiv(Math.max(cost, 1) * st.scale - st.tokens, st.refill);
    const ttl = write ? ceilDiv(st.full - st.tokens, st.refill) : 0;
    const past = st.tokens < 0 ? ceilDiv(-st.tokens, st.scale) : 0;
    const remaining = Math.max(0, Math.floor(st.tokens / st.scale));
    return { remaining, past, reset, write, ttl };
  },
  giveBack(st, limit, burst, cost) {
    const fits = tokenBucket.fits(st, limit, burst, 1) === undefined ? undefined : true;
    let write: CounterState | undefined;
    if (cost > 0 && st.t !== undefined && st.tokens < st.full) {
      st.tokens = Math.min(st.full, st.tokens + cost * st.scale);
      write = { t: st.now, k: st.tokens, s: st.scale };
    }
    const settled = tokenBucket.settle(st, limit, 0, fits, false);
    return { ...settled, write, ttl: write ? ceilDiv(st.full - st.tokens, st.refill) : 0 };
  },
};

/**
 * lua/calendar_window.lua: a fixed window between two of four boundaries (see calendar.ts),
 * the ones around now; the window's start stands for its index.
 */
export function loadCalendarWindow(
  stored: CounterState | undefined,
  now: number,
  bounds: readonly number[],
): Loaded {
  if (stored?.t !== undefined && stored.t > now) now = stored.t;
  const [start, end] = calendarWindowAt(bounds, now);
  const c = stored?.w === start ? (stored.c ?? 0) : 0;
  const window = end - start;
  const e = Math.min(Math.max(now - start, 0), window - 1);
  return { ...EMPTY, now, window, index: start, e, c };
}

/**
 * The window of four boundaries that holds `at`: the first or the last when `at` lies outside
 * them all (a clock more than a period away from the service's), so that a reset is never 0.
 */
export function calendarWindowAt(bounds: readonly number[], at: number): [number, number] {
  let i = 0;
  while (i < 2 && at >= (bounds[i + 1] as number)) i++;
  return [bounds[i] as number, bounds[i + 1] as number];
}

export const ALGORITHM_IMPLS: Readonly<Record<Algorithm, AlgorithmImpl>> = {
  fixed_window: fixedWindow,
  sliding_window: slidingWindow,
  token_bucket: tokenBucket,
};
