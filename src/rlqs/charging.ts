/**
 * A report's charges, and what they say of a rule: its allowed requests land on the rule's
 * counters, as a classic check's would; each counter's RLQS clients share its rate as a pool; and
 * a window that classic checks have spent is denied to them.
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
 * A window rule's counter that has less left in its window than half of what its RLQS clients
 * would take, at the rule's rate, before this stream's next report (or the window's end, if
 * sooner): classic checks (or fallbacks) have taken more than their part. Denied now, the rest
 * goes to classic checks. Clients alone on a rule keep to its pace, and are never denied so.
 *
 * A report's charges land in the window it arrives in, so a fixed window's count also holds what
 * the streams admitted before the window began, in the part of each one's first report there
 * that came before the boundary: `carried[at]`, the pool's consumers' together (store/demand.ts),
 * given back to what is left. With reports as far apart as Envoy's released 5 s, half a window,
 * the part is large: unseen, clients alone would look spent in every window whose boundary came
 * just before their reports, and each stream's own part alone is not enough when they report
 * together.
 */
export function spent(
  counters: readonly CounterCheck[],
  results: readonly CounterResult[],
  intervalMs: number | undefined,
  carried: readonly number[] = [],
): boolean {
  return counters.some((counter, at) => {
    const result = results[at];
    if (counter.shadow || counter.algorithm === 'token_bucket' || result === undefined) {
      return false;
    }
    let untilNextMs = intervalMs ?? 1_000;
    if (counter.algorithm === 'fixed_window' && result.resetMs >= 0) {
      untilNextMs = Math.min(untilNextMs, result.resetMs);
    }
    // Spent, whatever was carried: RLQS clients alone never fill a window (their pace leaves
    // half a second of it), and past the limit what is left reads 0, however far past.
    if (result.remaining <= 0) return true;
    const expected = (poolOf(counter).ratePerSecond * untilNextMs) / 1_000;
    return result.remaining + (carried[at] ?? 0) < expected / 2;
  });
}

/** What a stream's reports charged to a fixed window that it admitted before the window began. */
export interface Carry {
  /** The window's end, on the session's monotonic clock. */
  endsAt: number;
  requests: number;
}

/**
 * Adds a report's part from before its window began to `carry` (a new window starts it afresh),
 * and returns the window's whole carry. The report's allowed requests came evenly over
 * `coveredMs` before `at`; the window has `resetMs` left of `windowMs`.
 */
export function carryOver(
  carry: Carry | undefined,
  report: { at: number; allowed: number; coveredMs: number },
  window: { windowMs: number; resetMs: number },
): Carry {
  const endsAt = report.at + window.resetMs;
  // One window's ends, seen from reports at different times, differ by the calls' latency.
  const same = carry !== undefined && Math.abs(carry.endsAt - endsAt) < window.windowMs / 2;
  const sinceStartMs = window.windowMs - window.resetMs;
  const beforeMs = Math.max(0, report.coveredMs - sinceStartMs);
  const part = report.coveredMs > 0 ? report.allowed * Math.min(1, beforeMs / report.coveredMs) : 0;
  return { endsAt, requests: (same ? carry.requests : 0) + part };
}

/**
 * Charges a report's allowed requests to its counters, with overdraw: they were admitted already.
 * Charged even when none was (cost 0 consumes nothing): a window that classic checks have spent
 * is answered DENY_ALL. Resolves with the counters'
 * results, and tells of what passed a limit in its window.
 */
export async function charge(
  options: ChargeOptions,
  counters: readonly CounterCheck[],
  allowed: number,
  nowMs: number | undefined,
): Promise<CounterResult[]> {
  const charged = counters.map((counter) => ({
    ...counter,
    cost: Math.min(allowed, COST_CAP),
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
