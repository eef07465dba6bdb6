import type { Redis } from 'ioredis';

/**
 * Counters read before and after a run: Redis's per-command call counts, and tollgate's answers
 * by outcome from /metrics. Their differences are what the run cost and what it decided.
 */
export type Counts = Record<string, number>;

/** Script calls: a decision is one of these, whatever the number of descriptors. */
const SCRIPT_COMMANDS = ['eval', 'evalsha', 'eval_ro', 'evalsha_ro', 'fcall', 'fcall_ro'];

/**
 * `INFO commandstats` as calls per command, without the INFO calls that read it, and the
 * microseconds Redis spent executing each command (`usec`), keyed `NAME.usec`.
 */
export async function redisCommandCalls(client: Redis): Promise<Counts> {
  const text = await client.info('commandstats');
  const calls: Counts = {};
  for (const match of text.matchAll(/^cmdstat_([^:]+):calls=(\d+),usec=(\d+)/gm)) {
    if (match[1] === 'info') continue;
    calls[match[1]!] = Number(match[2]);
    calls[`${match[1]!}.usec`] = Number(match[3]);
  }
  return calls;
}

const isMicros = (name: string) => name.endsWith('.usec');

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
  return Object.entries(delta).reduce(
    (sum, [name, value]) => sum + (isMicros(name) ? 0 : value),
    0,
  );
}

/**
 * The microseconds Redis spent executing commands, as opposed to reading, parsing and answering
 * them. A script's time includes its inner commands, which commandstats also lists on their own:
 * when scripts ran, only the scripts count (tollgate sends nothing else under load); otherwise
 * every command does.
 */
export function executionMicros(delta: Counts): number {
  const scripts = SCRIPT_COMMANDS.reduce((sum, name) => sum + (delta[`${name}.usec`] ?? 0), 0);
  if (scriptCalls(delta) > 0) return scripts;
  return Object.entries(delta).reduce(
    (sum, [name, value]) => sum + (isMicros(name) ? value : 0),
    0,
  );
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
