import type { Redis } from 'ioredis';

/**
 * Counters read before and after a run: Redis's per-command call counts, and tollgate's answers
 * by outcome from /metrics. Their differences are what the run cost and what it decided.
 */
export type Counts = Record<string, number>;

/** Script calls: a decision is one of these, whatever the number of descriptors. */
const SCRIPT_COMMANDS = ['eval', 'evalsha', 'eval_ro', 'evalsha_ro', 'fcall', 'fcall_ro'];

/** `INFO commandstats` as calls per command, without the INFO calls that read it. */
export async function redisCommandCalls(client: Redis): Promise<Counts> {
  const text = await client.info('commandstats');
  const calls: Counts = {};
  for (const match of text.matchAll(/^cmdstat_([^:]+):calls=(\d+)/gm)) {
    if (match[1] !== 'info') calls[match[1]!] = Number(match[2]);
  }
  return calls;
}

export function difference(after: Counts, before: Counts): Counts {
  const delta: Counts = {};
  for (const [name, value] of Object.entries(after)) {
    const change = value - (before[name] ?? 0);
    if (change !== 0) delta[name] = change;
  }
  return delta;
}

export function scriptCalls(delta: Counts): number {
  return SCRIPT_COMMANDS.reduce((sum, name) => sum + (delta[name] ?? 0), 0);
}

export function allCalls(delta: Counts): number {
  return Object.values(delta).reduce((sum, value) => sum + value, 0);
}

/** tollgate's answers so far by outcome (ok, over_limit, unavailable, ...), from /metrics. */
export async function tollgateOutcomes(httpUrl: string): Promise<Counts> {
  const response = await fetch(`${httpUrl}/metrics`);
  if (!response.ok) throw new Error(`${httpUrl}/metrics answered ${response.status}`);
  const text = await response.text();
  const outcomes: Counts = {};
  const line = /^tollgate_check_duration_seconds_count\{([^}]*)\} (\S+)$/gm;
  for (const [, labels, value] of text.matchAll(line)) {
    const outcome = /outcome="([^"]*)"/.exec(labels ?? '')?.[1];
    if (outcome) outcomes[outcome] = (outcomes[outcome] ?? 0) + Number(value);
  }
  return outcomes;
}
