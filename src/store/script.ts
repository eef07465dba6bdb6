// The decision script of lua/, joined into one, and its calls: the arguments a decision, a batch
// or a refund sends, and the reading of their replies.
import type { CounterCheck, CounterResult, StoreDecision } from './Store.js';
import {
  describeReply,
  type BatchedDecide,
  type DecideTime,
  type ScriptArgs,
} from './scriptCall.js';
import {
  fixedWindowArgs,
  fixedWindowBatchArgs,
  fixedWindowCounting,
  readFixedWindow,
  readFixedWindowBatch,
  type FixedWindowCounting,
} from './fixedWindowScript.js';
import { decisionCode, scriptSha, type ScriptName } from './library.js';
import { boundsAround } from '../rules/calendar.js';

export type { BatchedDecide, DecideTime, ScriptArgs };

export { scriptSha, type ScriptName };

/** The decision script, as EVAL runs it (see library.ts). */
export function loadDecisionScript(): string {
  return decisionCode().scripts.decision;
}

/**
 * The health probe's check: one unit of a 1-second fixed window on a counter of its own, so
 * that it reads, decides and writes as a check does, and its key expires within a second. The
 * key is under the namespace's prefix (the ACL's key pattern) and can never be a counter's:
 * those hash tags start with a length.
 */
export function probeArgs(key: string, nowMs: number | undefined): ScriptArgs {
  const check: CounterCheck = {
    key,
    algorithm: 'fixed_window',
    windowMs: 1_000,
    limit: 4_294_967_295,
    burst: 4_294_967_295,
    cost: 1,
    shadow: false,
    quota: false,
    overdraw: false,
    // Every command a new counter needs, PEXPIRE included, whatever the probe wrote before.
    renew: true,
  };
  return decideArgs([check], { nowMs, skewToleranceMs: 0 });
}

export const ALGORITHM_CODES = { fixed_window: 1, sliding_window: 2, token_bucket: 3 } as const;
/** lua/calendar_window.lua: a fixed window whose window argument is its four boundaries. */
const CALENDAR_WINDOW = 4;

/** The flags of lua/dispatch.lua. */
const SHADOW = 1;
const QUOTA = 2;
const OVERDRAW = 4;
const PART = 8;
const REFERENCE = 16;
const STOP = 32;
const HELD = 64;
const CACHED = 128;
const RENEW = 256;
const GIVE_BACK = 512;
const DEEP = 1024;

function referenceFlags(check: CounterCheck): number {
  const counting = check.reference;
  if (counting === undefined) return 0;
  return (
    REFERENCE +
    (counting.stop ? STOP : 0) +
    (counting.held ? HELD : 0) +
    (counting.cached ? CACHED : 0)
  );
}

/**
 * A decide call. `part`: the call holds only some of a request's counters (a request spanning
 * several cluster slots), so quota counters do not gate it and the reply tells what each counter
 * reports when it is refunded.
 */
export function decideArgs(
  checks: readonly CounterCheck[],
  time: DecideTime,
  part = false,
): ScriptArgs {
  const args: ScriptArgs = [checks.length];
  for (const check of checks) args.push(check.key);
  args.push(time.nowMs === undefined ? '' : time.nowMs, time.skewToleranceMs);
  pushCounters(args, checks, part, time.nowMs);
  return args;
}

/** The 6 arguments of each counter, as dispatch.lua reads them. */
function pushCounters(
  args: ScriptArgs,
  checks: readonly CounterCheck[],
  part: boolean,
  nowMs: number | undefined,
): void {
  for (const check of checks) {
    const bounds =
      check.bounds ??
      (check.calendar ? boundsAround(check.calendar, nowMs ?? Date.now()) : undefined);
    args.push(
      bounds ? CALENDAR_WINDOW : ALGORITHM_CODES[check.algorithm],
      bounds ? bounds.join(',') : check.windowMs,
      check.limit,
      check.burst,
      check.cost,
      (check.shadow ? SHADOW : 0) +
        (check.quota ? QUOTA : 0) +
        (check.overdraw ? OVERDRAW : 0) +
        (part ? PART : 0) +
        (check.renew ? RENEW : 0) +
        (check.giveBack ? GIVE_BACK : 0) +
        (check.deepDebt ? DEEP : 0) +
        referenceFlags(check),
    );
  }
}

/** A part call's reply: the decision, and what a refund of it needs. */
export interface CallDecision extends StoreDecision {
  /** Per counter, what it reports when nothing of it stays consumed. */
  kept: CounterResult[];
  /** The moment the call decided at, in ms; a refund names it. */
  atMs: number;
}

/** One script call: the script, and its arguments (numkeys, KEYS, then ARGV). */
export interface ScriptCall {
  script: ScriptName;
  args: ScriptArgs;
}

/** A decide call for a whole request, and how to read its reply. */
export interface DecideCall extends ScriptCall {
  read(reply: unknown): StoreDecision;
}

/** A batch call, and how to read its reply: each request's decision or its own error. */
export interface BatchCall extends ScriptCall {
  read(reply: unknown): (StoreDecision | Error)[];
}

/**
 * A decide call for a whole request: on the plain fixed-window entry point when every counter
 * allows it, otherwise on the decision script. Each replies in its own way, which `read` knows.
 */
export function decideCall(checks: readonly CounterCheck[], time: DecideTime): DecideCall {
  const counting = fixedWindowCounting(checks);
  if (counting === undefined) {
    return {
      script: 'decision',
      args: decideArgs(checks, time),
      read: (reply) => readDecision(reply, checks.length),
    };
  }
  return {
    script: 'fixedWindow',
    args: fixedWindowArgs(checks, time, counting),
    read: (reply) => readFixedWindow(reply, checks, counting),
  };
}

/** The reply of a decide call for a whole request: the store's decision, as it is returned. */
export function readDecision(reply: unknown, count: number): StoreDecision {
  const numbers = replyNumbers(reply, 3, count);
  const results: CounterResult[] = [];
  for (let i = 1; i < numbers.length - 1; i += 3) results.push(resultAt(numbers, i));
  return { allowed: numbers[0] === 1, results };
}

/** The reply of a part call (see `decideArgs`). */
export function readPartDecision(reply: unknown, count: number): CallDecision {
  const numbers = replyNumbers(reply, 5, count);
  const results: CounterResult[] = [];
  const kept: CounterResult[] = [];
  for (let i = 1; i < numbers.length - 1; i += 5) {
    results.push(resultAt(numbers, i));
    kept.push({
      fits: numbers[i] === 1,
      remaining: numbers[i + 3] as number,
      resetMs: numbers[i + 4] as number,
    });
  }
  return { allowed: numbers[0] === 1, results, kept, atMs: numbers[numbers.length - 1] as number };
}

/** allowed, `width` numbers per counter, then the time the call decided at. */
function replyNumbers(reply: unknown, width: number, count: number): number[] {
  if (!Array.isArray(reply) || reply.length !== 2 + width * count) {
    throw new Error(`ERR unexpected reply from the decision script: ${describeReply(reply)}`);
  }
  return reply as number[];
}

function resultAt(numbers: number[], i: number): CounterResult {
  const remaining = numbers[i + 1] as number;
  const result: CounterResult = {
    fits: numbers[i] === 1,
    remaining: Math.max(0, remaining),
    resetMs: numbers[i + 2] as number,
  };
  // An overdraw counter past its limit replies how far past, as a negative remaining.
  if (remaining < 0) result.past = -remaining;
  return result;
}

/** A batch call: several requests, each decided in turn, in one script call (see dispatch.lua). */
export function batchArgs(requests: readonly BatchedDecide[], skewToleranceMs: number): ScriptArgs {
  let keys = 0;
  for (const request of requests) keys += request.checks.length;
  const args: ScriptArgs = [keys];
  for (const request of requests) for (const check of request.checks) args.push(check.key);
  args.push('batch', skewToleranceMs);
  for (const request of requests) {
    args.push(request.nowMs === undefined ? '' : request.nowMs, request.checks.length);
    pushCounters(args, request.checks, false, request.nowMs);
  }
  return args;
}

/**
 * A batch call: on the plain fixed-window entry point when every request of it may go there,
 * otherwise on the decision script.
 */
export function batchCall(requests: readonly BatchedDecide[], skewToleranceMs: number): BatchCall {
  const countings: FixedWindowCounting[] = [];
  for (const request of requests) {
    const counting = fixedWindowCounting(request.checks);
    if (counting === undefined) {
      return {
        script: 'decision',
        args: batchArgs(requests, skewToleranceMs),
        read: (reply) =>
          readBatch(reply, requests, (own, { checks }) => readDecision(own, checks.length)),
      };
    }
    countings.push(counting);
  }
  const { args, specs, specCount } = fixedWindowBatchArgs(requests, countings, skewToleranceMs);
  return {
    script: 'fixedWindow',
    args,
    read: (reply) => readFixedWindowBatch(reply, requests, countings, specs, specCount),
  };
}

/**
 * The replies of a batch call, one per request, in order: a decision, or the error reply of a
 * request that failed alone (its counter is not one of tollgate's), or the error of a reply that
 * cannot be read.
 */
function readBatch(
  reply: unknown,
  requests: readonly BatchedDecide[],
  readOne: (own: unknown, request: BatchedDecide, i: number) => StoreDecision,
): (StoreDecision | Error)[] {
  if (!Array.isArray(reply) || reply.length !== requests.length) {
    throw new Error(`ERR unexpected reply from the decision script: ${describeReply(reply)}`);
  }
  return requests.map((request, i) => {
    const own: unknown = reply[i];
    if (own instanceof Error) return own;
    try {
      return readOne(own, request, i);
    } catch (error) {
      return error as Error;
    }
  });
}

/** A refund call: gives back each counter's cost, consumed by a decide call at `atMs`. */
export function refundArgs(checks: readonly CounterCheck[], atMs: number): ScriptArgs {
  const args: ScriptArgs = [checks.length];
  for (const check of checks) args.push(check.key);
  args.push('refund', atMs);
  pushCounters(args, checks, false, atMs);
  return args;
}

/**
 * Whether a part call that was allowed consumed this counter in a way a refund undoes: shadow
 * counters stay outside the gate, and overdraw and reference counters always consume, so none of
 * them is refunded; a give-back counter consumed nothing, and its giving back stands;
 * a quota counter was consumed only when it fit; a cost of 0 consumed nothing.
 */
export function refundable(check: CounterCheck, result: CounterResult): boolean {
  if (check.shadow || check.overdraw || check.reference || check.giveBack || check.cost === 0) {
    return false;
  }
  return !check.quota || result.fits;
}
