import { readFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { Redis } from 'ioredis';
import {
  batchCall,
  decideCall,
  readDecision,
  type BatchedDecide,
  type ScriptCall,
  type ScriptName,
} from '../../src/store/script.js';
import type { CounterCheck, StoreDecision } from '../../src/store/Store.js';
import type { TestRedis } from './redis.js';

/**
 * An instance of the release before Redis Functions, as far as Redis sees it: its scripts
 * (test/fixtures/previous-lua, joined as its script.ts joined them), sent by EVALSHA and by EVAL
 * after a NOSCRIPT, with the arguments today's script.ts and fixedWindowScript.ts lay out, which
 * did not change, except the plain fixed-window batch call: that release sent every key and
 * counter of each request (`previousFixedWindowBatch`). Its replies, of either script, were the
 * decision script's.
 */
export interface PreviousInstance {
  decide(checks: readonly CounterCheck[], nowMs: number | undefined): Promise<StoreDecision>;
  /** One batch call, as its batcher sent requests that arrived together. */
  decideBatch(requests: readonly BatchedDecide[]): Promise<(StoreDecision | Error)[]>;
  close(): void;
}

export function previousScripts(): Record<ScriptName, string> {
  const dir = new URL('../fixtures/previous-lua/', import.meta.url);
  const read = (file: string) => readFileSync(fileURLToPath(new URL(file, dir)), 'utf8');
  const decision = ['lib.lua', 'fixed_window.lua', 'sliding_window.lua', 'token_bucket.lua'];
  return {
    decision: [...decision, 'dispatch.lua'].map(read).join('\n'),
    fixedWindow: read('plain_fixed_window.lua'),
  };
}

export function previousInstance(redis: TestRedis, skewToleranceMs = 0): PreviousInstance {
  const client = new Redis({ host: redis.host, port: redis.port, maxRetriesPerRequest: 0 });
  client.on('error', () => {});
  const scripts = previousScripts();
  client.defineCommand('previousDecision', { lua: scripts.decision });
  client.defineCommand('previousFixedWindow', { lua: scripts.fixedWindow });
  const commands = client as unknown as Record<
    'previousDecision' | 'previousFixedWindow',
    (...args: (string | number)[]) => Promise<unknown>
  >;
  const send = (call: ScriptCall) =>
    call.script === 'decision'
      ? commands.previousDecision(...call.args)
      : commands.previousFixedWindow(...call.args);
  return {
    async decide(checks, nowMs) {
      const reply = await send(decideCall(checks, { nowMs, skewToleranceMs }));
      return readDecision(reply, checks.length);
    },
    async decideBatch(requests) {
      // That release's replies, of either script, were the decision script's, request by request.
      const call = batchCall(requests, skewToleranceMs);
      const replies = (await send(
        call.script === 'fixedWindow' ? previousFixedWindowBatch(requests, call) : call,
      )) as unknown[];
      return requests.map((request, i) => {
        const own = replies[i];
        return own instanceof Error ? own : readDecision(own, request.checks.length);
      });
    },
    close: () => client.disconnect(),
  };
}

/**
 * The plain fixed-window batch call as that release laid it out: the requests' keys one request
 * after another, then 'batch', the skew, and per request its now, its number of counters, its
 * counting and each counter's window, limit and cost. Today's call says the skew and each
 * request's counting.
 */
function previousFixedWindowBatch(
  requests: readonly BatchedDecide[],
  today: ScriptCall,
): ScriptCall {
  const [keyCount] = today.args as [number];
  const skew = today.args[keyCount + 2] as number;
  const specCount = today.args[keyCount + 3] as number;
  // Each request's counting is the first of its three leading arguments after the specs.
  let at = keyCount + 4 + 4 * specCount;
  const keys: string[] = [];
  const rest: (string | number)[] = [];
  for (const request of requests) {
    const counting = today.args[at + 2] as number;
    rest.push(request.nowMs === undefined ? '' : request.nowMs, request.checks.length, counting);
    for (const check of request.checks) {
      keys.push(check.key);
      rest.push(check.windowMs, check.limit, check.cost);
    }
    at += 3 + request.checks.length;
  }
  return { script: 'fixedWindow', args: [keys.length, ...keys, 'batch', skew, ...rest] };
}
