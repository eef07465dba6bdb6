/**
 * A report's charges, and what they say of a rule: its allowed requests land on the rule's
 * counters, as a classic check's would, charged ahead of the client's admissions; each counter's
 * RLQS clients share its rate as a pool; a window that classic checks have filled leaves them
 * what they hold of it; and what the store says landed past a limit is over-admission.
 */
import { COST_CAP, type CounterCheck, type CounterResult, type Store } from '../store/Store.js';
import { START_MS, type Pool } from './assign.js';

export interface ChargeOptions {
  store: Store;
  /** Told of reported allowed requests that landed past their rule's limit (`charge`). */
  onOverAdmitted?(requests: number): void;
}

/** What one report charges one counter. */
export interface CounterCharge {
  /** Charged now: reported allowed requests past what was charged ahead, and a top-up. */
  cost: number;
  /** Of `cost`, requests its client has admitted already; the rest is charged ahead. */
  admitted: number;
  /** What the counter holds charged ahead for the bucket once this charge lands. */
  ahead: number;
}

/** A report's allowed requests charged as reported, with nothing ahead. */
export const asReported = (allowed: number): CounterCharge => ({
  cost: allowed,
  admitted: allowed,
  ahead: 0,
});

/**
 * A window rule's rate leaves room for what new token buckets start with: each stream's bucket
 * may start full once a window (its first assignment, or a new window after a spent one), and
 * Envoy admits that on top of its refill. A bucket holds START_MS of its share (assign.ts), so
 * the streams' starts together take START_MS of the rule's rate. Windows under 10 s keep the
 * whole rate.
 */
const RESERVE_FROM_MS = 10_000;

export function poolOf(counter: CounterCheck): Pool {
  const windowRate = counter.limit / (counter.windowMs / 1000);
  const reserve =
    counter.algorithm !== 'token_bucket' && counter.windowMs >= RESERVE_FROM_MS
      ? START_MS / counter.windowMs
      : 0;
  return {
    ratePerSecond: windowRate * (1 - reserve),
    burst: counter.algorithm === 'token_bucket' ? counter.burst : undefined,
    windowMs: counter.windowMs,
  };
}

/** Where a rule counter's RLQS demand lives: beside the counter, under its hash tag. */
export const poolKey = (counter: CounterCheck): string => `${counter.key}:rlqs`;

/**
 * What a report's charge leaves a bucket of its windows (`roomLeft`): nothing constrains it; or
 * a window is spent and the bucket is denied it; or it may admit `ratePerSecond` to the window's
 * end, what its reserve still holds of the window. `untilMs`: the wall time the window holding
 * it back ends, when a window does (not a token bucket's debt, nor a window charged as reported).
 */
export type Room =
  | { kind: 'open' }
  | { kind: 'spent'; untilMs?: number }
  | { kind: 'graded'; ratePerSecond: number; untilMs: number };

/**
 * A window the charge filled: classic checks (or fallbacks) took more than their part, since the
 * RLQS clients' own admissions are charged ahead (`reserveAhead`) and their pace leaves half a
 * second of the window. What the bucket's reserve still holds of the window (its reserve less
 * what the count passed the limit by) is its room: shared out as a lower rate to the window's
 * end, not refused, since a window denied at its middle report went to classic checks that
 * wanted less than the rest of it (0.83 L under load). With no room left, the window is spent
 * and denied; the rest of it goes to classic checks. A counter charged as reported (no reserve)
 * has no room once it has nothing left.
 *
 * A token bucket is spent when its debt passes twice what its RLQS clients can owe: a burst (the
 * clients' buckets start full) and a reporting interval of its rate (their reserves). Classic
 * checks take only tokens that are there, so what passes that was admitted by clients past their
 * assignments, on fallbacks (no assignment, an expired one): denied, the clients let refills pay
 * it back. `intervalMs`: the bucket's reporting interval.
 */
export function roomLeft(
  counters: readonly CounterCheck[],
  results: readonly CounterResult[],
  reserves: ReadonlyMap<string, Reserve>,
  at: { wallMs: number; intervalMs: number },
): Room {
  let rate = Infinity;
  let untilMs = -Infinity;
  for (const [i, counter] of counters.entries()) {
    const result = results[i];
    if (counter.shadow || result === undefined) continue;
    if (counter.algorithm === 'token_bucket') {
      const owed = counter.burst + (counter.limit * at.intervalMs) / counter.windowMs;
      if ((result.past ?? 0) > 2 * owed) return { kind: 'spent' };
      continue;
    }
    // The limit less the count: negative past it.
    const left = result.remaining - (result.past ?? 0);
    if (left > 0) continue;
    const window = reserveSpan(counter, at.wallMs);
    const reserve = reserves.get(counter.key);
    const held = window !== undefined && reserve?.window === window.index ? reserve.requests : 0;
    if (window === undefined) return { kind: 'spent' };
    if (held + left <= 0) return { kind: 'spent', untilMs: at.wallMs + window.leftMs };
    rate = Math.min(rate, ((held + left) * 1000) / window.leftMs);
    untilMs = Math.max(untilMs, at.wallMs + window.leftMs);
  }
  return rate === Infinity ? { kind: 'open' } : { kind: 'graded', ratePerSecond: rate, untilMs };
}

/** What a bucket holds charged ahead on a counter, and the fixed window it was charged in. */
export interface Reserve {
  requests: number;
  /** The window's index: its start over its length; 0 for a token bucket, which has none. */
  window: number;
  /**
   * A bucket resumed as its window ended (session.ts): what it held of the window before, which
   * its next report's allowed requests come out of first, since they were charged there.
   */
  before?: number;
}

/**
 * Charging ahead: a report's allowed requests were admitted over the interval before it, and
 * land in the counter only now, a whole reporting interval late (Envoy's released 5 s is half a
 * 10 s window; a token bucket's burst is often a second of its rate), while classic checks on the same counter see none of them. So each report also
 * charges what its client will admit, at its rate, before its next report: its reserve. The next
 * report's allowed requests come out of the reserve, and only what passes it is charged; the
 * reserve is topped up to `target` again: what the client admits before its next report or the
 * window's end, whichever comes first (what it admits after lands in the next window when it is
 * reported, as without a reserve). A reserve charged in an earlier window was spent with that
 * window, so the new window's is charged whole. What a reserve holds past what its client
 * admitted stays charged (a client slower than its rate counts a little early), but a bucket
 * denied its window gives its reserve back (`releaseReserves`). Plain fixed windows of 10 s or
 * more, and token buckets, are charged ahead (`reserveSpan`).
 */
export function reserveAhead(
  last: Reserve | undefined,
  allowed: number,
  target: number,
  window: number,
): { charge: CounterCharge; reserve: Reserve } {
  const fresh = Math.max(0, allowed - (last?.before ?? 0));
  const held = last?.requests ?? 0;
  const over = Math.max(0, fresh - held);
  const left = last !== undefined && last.window === window ? Math.max(0, held - fresh) : 0;
  const topUp = Math.max(0, Math.floor(target) - left);
  const ahead = left + topUp;
  return {
    charge: { cost: over + topUp, admitted: over, ahead },
    reserve: { requests: ahead, window },
  };
}

/**
 * What a counter charged ahead holds its reserves in: for a plain fixed window of 10 s or more,
 * the window holding `wallMs`, as its index and the milliseconds left in it; for a token bucket,
 * which has no windows, index 0 without end (its debt goes deep enough for the reserves: the
 * store's deepDebt). Undefined for the counters charged as reported, not ahead: calendar
 * windows, sliding windows and short windows.
 */
export function reserveSpan(
  counter: CounterCheck,
  wallMs: number,
): { index: number; leftMs: number } | undefined {
  if (counter.algorithm === 'token_bucket') return { index: 0, leftMs: Infinity };
  if (counter.algorithm !== 'fixed_window' || counter.calendar !== undefined) return undefined;
  // A window much shorter than a reporting interval would hold the reserves of several of its
  // successors: charged as reported.
  if (counter.windowMs < RESERVE_FROM_MS) return undefined;
  const index = Math.floor(wallMs / counter.windowMs);
  return { index, leftMs: (index + 1) * counter.windowMs - wallMs };
}

/**
 * Gives back what `counters` hold charged ahead in their current windows (`reserves`) past what
 * the bucket's client will admit at `ratePerSecond` to each window's end: all of it for a bucket
 * denied its window (rate 0), whose client will admit none of it. Classic checks may take it.
 * The store gives back no more than the window counted.
 */
export async function releaseReserves(
  store: Store,
  counters: readonly CounterCheck[],
  reserves: Map<string, Reserve>,
  at: { wallMs: number; nowMs: number | undefined; ratePerSecond: number },
): Promise<void> {
  const giveBack = counters.flatMap((counter) => {
    const reserve = reserves.get(counter.key);
    const window = reserveSpan(counter, at.wallMs);
    if (reserve === undefined || window === undefined || reserve.window !== window.index) return [];
    // A token bucket's span has no end: what it holds is kept whole at any rate above 0.
    const fits =
      at.ratePerSecond <= 0 ? 0 : Math.floor((at.ratePerSecond * window.leftMs) / 1000 + 1e-6);
    const keep = Math.min(reserve.requests, fits);
    reserves.set(counter.key, { requests: keep, window: window.index });
    if (reserve.requests - keep <= 0) return [];
    const cost = Math.min(reserve.requests - keep, COST_CAP);
    return [{ ...counter, cost, giveBack: true, shadow: false, quota: false, overdraw: false }];
  });
  if (giveBack.length > 0) await store.decide(giveBack, at.nowMs);
}

/**
 * Charges a report to its counters (`reserveAhead`), with overdraw: the requests were admitted
 * already, or will be, and land in full, past the limit. Charged even when nothing is (a cost of
 * 0 consumes nothing): a window that classic checks have spent is answered DENY_ALL. Resolves
 * with the counters' results.
 *
 * Over-admission is what the store says: of the requests this report charges as admitted, those
 * that landed past an enforced counter's limit (a window's count past L, a token bucket's debt),
 * leaving out what the counter holds charged ahead (not admitted yet). Each charge is one atomic
 * call, so every instance counts its own charges' part past the limit, and the sum over the
 * instances is the rule's. A refund (is_negative_hits) lowers the count: what is charged past
 * the limit after it counts only as far as it passes the limit again. A request over several
 * rules counts once, for the limit it passed furthest.
 */
export async function charge(
  options: ChargeOptions,
  counters: readonly CounterCheck[],
  charges: readonly CounterCharge[],
  nowMs: number | undefined,
): Promise<CounterResult[]> {
  const charged = counters.map((counter, at) => ({
    ...counter,
    cost: Math.min(charges[at]?.cost ?? 0, COST_CAP),
    overdraw: true,
    deepDebt: true,
    shadow: false,
    quota: false,
    reference: undefined,
  }));
  const { results } = await options.store.decide(charged, nowMs);
  let over = 0;
  counters.forEach((counter, at) => {
    const { admitted = 0, ahead = 0 } = charges[at] ?? {};
    if (counter.shadow || admitted <= 0) return;
    const past = results[at]?.past ?? 0;
    over = Math.max(over, Math.min(admitted, past - ahead));
  });
  if (over > 0) options.onOverAdmitted?.(over);
  return results;
}
