import type { Redis } from 'ioredis';
import {
  decideArgs,
  decideCall,
  loadDecisionScript,
  type ScriptArgs,
} from '../src/store/script.js';
import { loadFixedWindowScript } from '../src/store/fixedWindowScript.js';
import type { CounterCheck } from '../src/store/Store.js';
import { median } from './stats.js';

/**
 * What one decision script call costs Redis itself, apart from the calls' I/O: each variant is
 * called `calls` times in pipelines on an idle Redis, and Redis's own `usec_per_call` for EVALSHA
 * (which includes the script's inner commands) is read from INFO commandstats. Rounds alternate
 * the variants, and the median of the rounds is kept.
 *
 * Beside tollgate's two scripts, the decision script and the plain fixed-window script that
 * requests of plain fixed windows run (each with one and with three fixed-window counters, the
 * same request), three scripts that decide nothing bound what any script could save:
 * - `return 1`: what EVALSHA costs by itself;
 * - the same Redis commands as a fixed-window check (TIME, then HMGET and HSET per counter), with
 *   no logic around them;
 * - a counter packed in one string instead (TIME, then GET and SET … KEEPTTL per counter).
 */
export interface ScriptCostPlan {
  calls: number;
  rounds: number;
}

export interface ScriptCostRow {
  variant: string;
  counters: number;
  rounds: number[];
  medianUs: number;
}

const PIPELINE = 200;
const TENANTS = 50;

/** The commands of a fixed-window check with no logic around them, as a script. */
export const HASH_COMMANDS = `
local t = redis.call('TIME')
for i = 1, #KEYS do
  redis.call('HMGET', KEYS[i], 't', 'w', 'c')
  redis.call('HSET', KEYS[i], 't', t[1], 'w', '1', 'c', '1')
end
return 1`;

/** The same on a counter packed in one string. */
export const STRING_COMMANDS = `
local t = redis.call('TIME')
for i = 1, #KEYS do
  redis.call('GET', KEYS[i])
  redis.call('SET', KEYS[i], t[1] .. ':1:1', 'KEEPTTL')
end
return 1`;

/** One fixed-window counter of the bench's scripts: a minute, a limit never reached, cost 1. */
export function check(key: string): CounterCheck {
  return {
    key,
    algorithm: 'fixed_window',
    windowMs: 60_000,
    limit: 1_000_000_000,
    burst: 1_000_000_000,
    cost: 1,
    shadow: false,
    quota: false,
    overdraw: false,
  };
}

interface Variant {
  name: string;
  counters: number;
  lua: string;
  /** The call's arguments, numkeys first, for tenant `i`. */
  args(i: number): ScriptArgs;
}

function variants(): Variant[] {
  const shipped = loadDecisionScript();
  const fixedWindow = loadFixedWindowScript();
  const keys = (prefix: string, i: number, n: number) =>
    Array.from({ length: n }, (_, k) => `tg:{${i}}:${prefix}:${k}`);
  const plain = (prefix: string, n: number) => (i: number) => [n, ...keys(prefix, i, n)];
  return [
    ...[1, 3].map((n) => ({
      name: "tollgate's decision script",
      counters: n,
      lua: shipped,
      args: (i: number) =>
        decideArgs(keys(`shipped${n}`, i, n).map(check), {
          nowMs: undefined,
          skewToleranceMs: 0,
        }),
    })),
    ...[1, 3].map((n) => ({
      name: "tollgate's plain fixed-window script",
      counters: n,
      lua: fixedWindow,
      args: (i: number) =>
        decideCall(keys(`fixed${n}`, i, n).map(check), { nowMs: undefined, skewToleranceMs: 0 })
          .args,
    })),
    { name: 'EVALSHA of `return 1`', counters: 0, lua: 'return 1', args: () => [0] },
    ...[1, 3].map((n) => ({
      name: 'the same commands, no logic (TIME, HMGET, HSET)',
      counters: n,
      lua: HASH_COMMANDS,
      args: plain(`hash${n}`, n),
    })),
    ...[1, 3].map((n) => ({
      name: 'a packed string instead, no logic (TIME, GET, SET KEEPTTL)',
      counters: n,
      lua: STRING_COMMANDS,
      args: plain(`string${n}`, n),
    })),
  ];
}

async function evalshaMicros(client: Redis): Promise<number> {
  const text = await client.info('commandstats');
  const match = /^cmdstat_evalsha:calls=\d+,usec=\d+,usec_per_call=([\d.]+)/m.exec(text);
  if (!match) throw new Error('INFO commandstats lists no EVALSHA');
  return Number(match[1]);
}

export async function runScriptCost(client: Redis, plan: ScriptCostPlan): Promise<ScriptCostRow[]> {
  const all = variants();
  const shas = await Promise.all(
    all.map((variant) => client.script('LOAD', variant.lua) as Promise<string>),
  );
  const rows: ScriptCostRow[] = all.map((variant) => ({
    variant: variant.name,
    counters: variant.counters,
    rounds: [],
    medianUs: NaN,
  }));
  for (let round = 0; round < plan.rounds; round += 1) {
    for (const [v, variant] of all.entries()) {
      await client.config('RESETSTAT');
      for (let sent = 0; sent < plan.calls; sent += PIPELINE) {
        const pipeline = client.pipeline();
        for (let i = 0; i < PIPELINE; i += 1) {
          const [numkeys, ...rest] = variant.args((sent + i) % TENANTS);
          pipeline.evalsha(shas[v]!, numkeys!, ...rest);
        }
        const replies = (await pipeline.exec()) ?? [];
        const failed = replies.find(([error]) => error);
        if (failed) throw new Error(`${variant.name}: ${String(failed[0])}`);
      }
      rows[v]!.rounds.push(await evalshaMicros(client));
    }
  }
  for (const row of rows) row.medianUs = median(row.rounds);
  return rows;
}
