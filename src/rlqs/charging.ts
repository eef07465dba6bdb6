/**
 * A report's charges, and what they say of a rule: its allowed requests land on the rule's
 * counters, as a classic check's would, charged ahead of the client's admissions; each counter's
 * RLQS clients share its rate as a pool; and a window that classic checks have spent is denied
 * to them.
 */
import { COST_CAP, type CounterCheck, type CounterResult, type Store } from '../store/Store.js';
import type { AdmissionWatch } from './admissions.js';
import { START_MS, type Pool } from './assign.js';

export interface ChargeOptions {
  store: Store;
  /** Over-admission as the reports show it (admissions.ts), shared by the process's streams. */
  admissions?: AdmissionWatch;
  /** Told of reported allowed requests past their rule's limit in its window. */
  onOverAdmitted?(requests: number): void;
}

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
 * A window rule's counter with nothing left in its window: classic checks (or fallbacks) took
 * more than their part, since the RLQS clients' own admissions are charged ahead (`reserveAhead`)
 * and their pace leaves half a second of the window. Denied now, the rest of the window goes to
 * classic checks. Token-bucket rules are never spent so.
 */
export function spent(
  counters: readonly CounterCheck[],
  results: readonly CounterResult[],
): boolean {
  return counters.some((counter, at) => {
    const result = results[at];
    if (counter.shadow || counter.algorithm === 'token_bucket' || result === undefined) {
      return false;
    }
    return result.remaining <= 0;
  });
}

/** What a bucket holds charged ahead on a counter, and the fixed window it was charged in. */
export interface Reserve {
  requests: number;
  /** The window's index: its start over its length. */
  window: number;
}

/**
 * Charging ahead: a report's allowed requests were admitted over the interval before it, and
 * land in the counter only now, a whole reporting interval late (Envoy's released 5 s is half a
 * 10 s window), while classic checks on the same counter see none of them. So each report also
 * charges what its client will admit, at its rate, before its next report: its reserve. The next
 * report's allowed requests come out of the reserve, and only what passes it is charged; the
 * reserve is topped up to `target` again: what the client admits before its next report or the
 * window's end, whichever comes first (what it admits after lands in the next window when it is
 * reported, as without a reserve). A reserve charged in an earlier window was spent with that
 * window, so the new window's is charged whole. What a reserve holds past what its client
 * admitted stays charged (a client slower than its rate counts a little early), but a bucket
 * denied its window gives its reserve back (`releaseReserves`). Only plain fixed windows of 10 s
 * or more are charged ahead.
 */
export function reserveAhead(
  last: Reserve | undefined,
  allowed: number,
  target: number,
  window: number,
): { cost: number; reserve: Reserve } {
  const held = last?.requests ?? 0;
  const over = Math.max(0, allowed - held);
  const left = last !== undefined && last.window === window ? Math.max(0, held - allowed) : 0;
  const topUp = Math.max(0, Math.floor(target) - left);
  return { cost: over + topUp, reserve: { requests: left + topUp, window } };
}

/**
 * The fixed window holding `wallMs`, as its index and the milliseconds left in it; undefined for
 * counters that are not plain fixed windows of 10 s or more (calendar windows, sliding windows,
 * token buckets, short windows), which are charged as reported, not ahead.
 */
export function fixedWindowAt(
  counter: CounterCheck,
  wallMs: number,
): { index: number; leftMs: number } | undefined {
  if (counter.algorithm !== 'fixed_window' || counter.calendar !== undefined) return undefined;
  // A window much shorter than a reporting interval would hold the reserves of several of its
  // successors: charged as reported.
  if (counter.windowMs < RESERVE_FROM_MS) return undefined;
  const index = Math.floor(wallMs / counter.windowMs);
  return { index, leftMs: (index + 1) * counter.windowMs - wallMs };
}

/**
 * Gives back what `counters` hold charged ahead in their current windows (`reserves`, which are
 * emptied): the bucket is denied its window, and its client will admit none of it. Classic checks
 * may take it. The store gives back no more than the window counted.
 */
export async function releaseReserves(
  store: Store,
  counters: readonly CounterCheck[],
  reserves: Map<string, Reserve>,
  at: { wallMs: number; nowMs: number | undefined },
): Promise<void> {
  const giveBack = counters.flatMap((counter) => {
    const reserve = reserves.get(counter.key);
    const window = fixedWindowAt(counter, at.wallMs);
    if (reserve === undefined || window === undefined || reserve.window !== window.index) return [];
    reserves.set(counter.key, { requests: 0, window: window.index });
    if (reserve.requests <= 0) return [];
    const cost = Math.min(reserve.requests, COST_CAP);
    return [{ ...counter, cost, giveBack: true, shadow: false, quota: false, overdraw: false }];
  });
  if (giveBack.length > 0) await store.decide(giveBack, at.nowMs);
}

/**
 * Charges a report's costs to its counters (`reserveAhead`), with overdraw: the requests were
 * admitted already, or will be. Charged even when none is (cost 0 consumes nothing): a window
 * that classic checks have spent is answered DENY_ALL. Resolves with the counters' results, and
 * tells of reported allowed requests that passed a limit in its window.
 */
export async function charge(
  options: ChargeOptions,
  counters: readonly CounterCheck[],
  costs: readonly number[],
  allowed: number,
  nowMs: number | undefined,
): Promise<CounterResult[]> {
  const charged = counters.map((counter, at) => ({
    ...counter,
    cost: Math.min(costs[at] ?? allowed, COST_CAP),
    overdraw: true,
    shadow: false,
    quota: false,
    reference: undefined,
  }));
  const { results } = await options.store.decide(charged, nowMs);
  if (allowed > 0 && options.admissions) {
    const at = nowMs ?? Date.now();
    for (const counter of counters) {
      if (counter.shadow) continue;
      const over = options.admissions.add(
        counter.key,
        counter.limit,
        counter.windowMs,
        allowed,
        at,
      );
      if (over > 0) options.onOverAdmitted?.(over);
    }
  }
  return results;
}
