/**
 * What a usage report may claim. A client's report moves shared state: its allowed requests are
 * charged to counters that other clients and classic checks share, its time_elapsed sets how long
 * its demand and its assignment live, and its demand sets the others' shares. So each is held to
 * what the client could have seen:
 * - time_elapsed, to the time since the bucket's last report on this stream (or the stream's
 *   start), with a second of slack for Envoy's own clock and whole seconds, and to MAX_ELAPSED_MS;
 * - allowed and denied requests, to MAX_REQUESTS_PER_SECOND over that time, and allowed requests
 *   to PLAUSIBLE_FACTOR times what the bucket's rules admit in it (a window's limit, or a token
 *   bucket's burst, on top of the rule's rate): past either, the report is refused
 *   INVALID_ARGUMENT, naming the bound, and nothing of it is charged;
 * - a consumer's demand, to its pool's rate (session.ts): no client can use more of a pool than
 *   all of it, so what it says it was denied past that cannot take the others' shares.
 */
import { InvalidRequestError } from '../core/errors.js';
import type { CounterCheck } from '../store/Store.js';
import type { BucketUsage } from './usage.js';

/** Slack on time_elapsed over the time the stream saw: Envoy's clock, and its whole seconds. */
export const ELAPSED_SLACK_MS = 1_000;
/** The longest time_elapsed taken: a few reporting intervals of any Envoy configuration. */
export const MAX_ELAPSED_MS = 5 * 60_000;
/** More requests a second than one Envoy's bucket sees, allowed or denied. */
export const MAX_REQUESTS_PER_SECOND = 10_000_000;
/** Allowed requests past this many times what the bucket's rules admit in the time are refused. */
export const PLAUSIBLE_FACTOR = 100;

/** time_elapsed as the stream could have seen it; undefined stays undefined. */
export function clampElapsed(reportedMs: number | undefined, seenMs: number): number | undefined {
  if (reportedMs === undefined) return undefined;
  return Math.min(reportedMs, Math.max(0, seenMs) + ELAPSED_SLACK_MS, MAX_ELAPSED_MS);
}

/**
 * Throws InvalidRequestError when the usage at `index` of a report claims more than the bounds
 * above allow, over `elapsedMs` (clamped) or, when Envoy left it out, the time the stream saw.
 */
export function checkPlausible(
  usage: BucketUsage,
  index: number,
  elapsedMs: number,
  counters: readonly CounterCheck[],
): void {
  const seconds = Math.max(elapsedMs, ELAPSED_SLACK_MS) / 1000;
  const field = (name: string) => `bucket_quota_usages[${index}].${name}`;
  const most = Math.ceil(MAX_REQUESTS_PER_SECOND * seconds);
  for (const [name, count] of [
    ['num_requests_allowed', usage.allowed],
    ['num_requests_denied', usage.denied],
  ] as const) {
    if (count > most) {
      throw new InvalidRequestError(
        `${field(name)} ${count} is more than ${most}, ${MAX_REQUESTS_PER_SECOND} a second over ${seconds} s`,
      );
    }
  }
  for (const counter of counters) {
    if (counter.shadow) continue;
    const head = counter.algorithm === 'token_bucket' ? counter.burst : counter.limit;
    const admits = (counter.limit * seconds * 1000) / counter.windowMs + head;
    const bound = Math.ceil(PLAUSIBLE_FACTOR * admits);
    if (usage.allowed > bound) {
      throw new InvalidRequestError(
        `${field('num_requests_allowed')} ${usage.allowed} is more than ${bound}, ${PLAUSIBLE_FACTOR} times what its rule (${counter.limit} per ${counter.windowMs / 1000} s) admits in ${seconds} s`,
      );
    }
  }
}
