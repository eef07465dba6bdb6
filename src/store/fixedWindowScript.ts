import {
  describeReply,
  type BatchedDecide,
  type DecideTime,
  type ScriptArgs,
} from './scriptCall.js';
import type { CounterCheck, CounterResult, StoreDecision } from './Store.js';
import { decisionCode } from './library.js';

/**
 * The entry point for requests whose every counter is a plain fixed window (see
 * lua/plain_fixed_window.lua): it decides them as the decision script does, at about half its
 * cost to Redis. A function of the library beside the decision function (or, where functions are
 * refused, a script of its own with its own SHA); `decideCall` and `batchCall` in script.ts choose
 * between the two, once per call. This is its script form, as EVAL runs it.
 */
export function loadFixedWindowScript(): string {
  return decisionCode().scripts.fixedWindow;
}

/**
 * How the script counts a request's counters: 'plain' when every one is a fixed window with no
 * flag, 'reference' when every one is a fixed window counted as the reference counts, with no
 * other flag (no STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT, not remembered over); undefined when
 * the request needs the decision script.
 */
export type FixedWindowCounting = 'plain' | 'reference';

export function fixedWindowCounting(
  checks: readonly CounterCheck[],
): FixedWindowCounting | undefined {
  let counting: FixedWindowCounting | undefined;
  for (const check of checks) {
    const own = ownCounting(check);
    if (own === undefined || (counting !== undefined && counting !== own)) return undefined;
    counting = own;
  }
  return counting;
}

function ownCounting(check: CounterCheck): FixedWindowCounting | undefined {
  if (check.algorithm !== 'fixed_window' || check.shadow || check.quota || check.overdraw) {
    return undefined;
  }
  if (check.renew === true || check.giveBack === true || check.calendar) return undefined;
  const reference = check.reference;
  if (reference === undefined) return 'plain';
  return reference.stop || reference.cached ? undefined : 'reference';
}

const COUNTINGS: Readonly<Record<FixedWindowCounting, number>> = { plain: 0, reference: 1 };

/** A decide call: numkeys, KEYS, then ARGV, as the script's header lays them out. */
export function fixedWindowArgs(
  checks: readonly CounterCheck[],
  time: DecideTime,
  counting: FixedWindowCounting,
): ScriptArgs {
  const args: ScriptArgs = [checks.length];
  for (const check of checks) args.push(check.key);
  args.push(time.nowMs === undefined ? '' : time.nowMs, time.skewToleranceMs, COUNTINGS[counting]);
  pushCounters(args, checks);
  return args;
}

/**
 * A batch call: each request with its own time and counting. Each key, and each counter (a key
 * with its window, limit and cost), is sent once, and each request names its counters by index:
 * the checks of a tenant under load share them, and each argument costs Redis a conversion.
 * `specs`: the index, among the call's counters, of each check of each request, in order.
 */
export function fixedWindowBatchArgs(
  requests: readonly BatchedDecide[],
  countings: readonly FixedWindowCounting[],
  skewToleranceMs: number,
): { args: ScriptArgs; specs: number[]; specCount: number } {
  // Per key: its index in KEYS, then each of its counters as (W, L, cost, index among the call's).
  const keys = new Map<string, number[]>();
  let specCount = 0;
  const specArgs: ScriptArgs = [];
  const named: ScriptArgs = [];
  const specs: number[] = [];
  requests.forEach((request, i) => {
    const counting = countings[i] as FixedWindowCounting;
    named.push(request.nowMs === undefined ? '' : request.nowMs, request.checks.length);
    named.push(COUNTINGS[counting]);
    for (const check of request.checks) {
      const { windowMs, limit, cost } = check;
      let key = keys.get(check.key);
      if (key === undefined) keys.set(check.key, (key = [keys.size + 1]));
      let counter = 0;
      for (let at = 1; at < key.length; at += 4) {
        if (key[at] === windowMs && key[at + 1] === limit && key[at + 2] === cost) {
          counter = key[at + 3] as number;
          break;
        }
      }
      if (counter === 0) {
        counter = ++specCount;
        key.push(windowMs, limit, cost, counter);
        specArgs.push(key[0] as number, windowMs, limit, cost);
      }
      named.push(counter);
      specs.push(counter);
    }
  });
  return {
    args: [keys.size, ...keys.keys(), 'batch', skewToleranceMs, specCount, ...specArgs, ...named],
    specs,
    specCount,
  };
}

/** The 3 arguments of each counter: W, L and the cost. */
function pushCounters(args: ScriptArgs, checks: readonly CounterCheck[]): void {
  for (const check of checks) args.push(check.windowMs, check.limit, check.cost);
}

/**
 * The reply of a decide call, { allowed, remaining_1, reset_ms_1, ... } (see the script's header),
 * as the store's decision. Whether each counter fits follows from the rest. Plain counting: every
 * counter of an allowed request fits; of a denied one, nothing was consumed, and a counter fits
 * when its cost (at least 1) fits what remains. Reference counting: remaining is the counter's
 * count after the call, and it fits when that is at most its limit.
 */
export function readFixedWindow(
  reply: unknown,
  checks: readonly CounterCheck[],
  counting: FixedWindowCounting,
): StoreDecision {
  if (!Array.isArray(reply) || reply.length !== 1 + 2 * checks.length) {
    throw new Error(
      `ERR unexpected reply from the plain fixed-window code: ${describeReply(reply)}`,
    );
  }
  const numbers = reply as number[];
  const allowed = numbers[0] === 1;
  const results: CounterResult[] = [];
  for (let i = 0; i < checks.length; i++) {
    const check = checks[i] as CounterCheck;
    const remaining = numbers[2 * i + 1] as number;
    results.push(result(allowed, check, counting, remaining, numbers[2 * i + 2] as number));
  }
  return { allowed, results };
}

/**
 * One counter's result from what the code sent: its remaining and its window's reset. A plain
 * counter whose cost exceeds its limit never fits, and no reset would help: -1.
 */
function result(
  allowed: boolean,
  check: CounterCheck,
  counting: FixedWindowCounting,
  remaining: number,
  resetMs: number,
): CounterResult {
  if (counting === 'reference') return { fits: remaining <= check.limit, remaining, resetMs };
  const cost = Math.max(check.cost, 1);
  return {
    fits: allowed || cost <= remaining,
    remaining,
    resetMs: cost > check.limit ? -1 : resetMs,
  };
}

/**
 * The reply of a batch call, one flat array (see the script's header): per request, an error
 * reply, or allowed and each counter's remaining, each followed by its reset when the request
 * gave its own time; then each of the call's counters' reset, which every request on Redis TIME
 * shares. Returns one decision or
 * error per request; throws when the reply cannot be read.
 */
export function readFixedWindowBatch(
  reply: unknown,
  requests: readonly BatchedDecide[],
  countings: readonly FixedWindowCounting[],
  specs: readonly number[],
  specCount: number,
): (StoreDecision | Error)[] {
  const unreadable = () =>
    new Error(`ERR unexpected reply from the plain fixed-window code: ${describeReply(reply)}`);
  if (!Array.isArray(reply)) throw unreadable();
  const resets = reply.length - specCount;
  const number = (at: number): number => {
    const value: unknown = reply[at];
    if (at >= resets || typeof value !== 'number') throw unreadable();
    return value;
  };
  let at = 0;
  let checked = 0;
  const decisions = requests.map((request, i): StoreDecision | Error => {
    const { checks, nowMs } = request;
    const own: unknown = reply[at];
    if (own instanceof Error) {
      at += 1;
      checked += checks.length;
      return own;
    }
    const counting = countings[i] as FixedWindowCounting;
    const allowed = number(at) === 1;
    at += 1;
    const results: CounterResult[] = [];
    for (const check of checks) {
      const remaining = number(at);
      let resetMs: number;
      if (nowMs === undefined) {
        const shared = reply[resets + (specs[checked] as number) - 1];
        if (typeof shared !== 'number') throw unreadable();
        resetMs = shared;
        at += 1;
      } else {
        resetMs = number(at + 1);
        at += 2;
      }
      checked += 1;
      results.push(result(allowed, check, counting, remaining, resetMs));
    }
    return { allowed, results };
  });
  if (at !== resets) throw unreadable();
  return decisions;
}
