import type { CounterCheck } from './Store.js';

/** The shapes of a script call, shared by the decision script and the plain fixed-window one. */
/** The script's arguments: numkeys, KEYS, then ARGV (see lua/dispatch.lua). */
export type ScriptArgs = (string | number)[];

/**
 * When a decide call decides. `nowMs`: the service's clock (CLOCK=local), or undefined for Redis
 * TIME. `skewToleranceMs`: with the service's clock, how much longer than its window a counter is
 * kept, so that an instance or a Redis whose clock disagrees by up to that much never finds it
 * gone early (CLOCK_SKEW_TOLERANCE).
 */
export interface DecideTime {
  nowMs: number | undefined;
  skewToleranceMs: number;
}

/** One request of a batch call. */
export interface BatchedDecide {
  checks: readonly CounterCheck[];
  nowMs: number | undefined;
}

/** A reply as an error message may show it: short, since a reply can hold a whole batch. */
export function describeReply(reply: unknown): string {
  const text = JSON.stringify(reply) ?? String(reply);
  return text.length > 200 ? `${text.slice(0, 200)}...` : text;
}
