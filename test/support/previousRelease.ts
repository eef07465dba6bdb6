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
 * did not change. Its replies, of either script, were the decision script's.
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
      const replies = (await send(batchCall(requests, skewToleranceMs))) as unknown[];
      return requests.map((request, i) => {
        const own = replies[i];
        return own instanceof Error ? own : readDecision(own, request.checks.length);
      });
    },
    close: () => client.disconnect(),
  };
}
