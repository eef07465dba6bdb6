import { spawnSync } from 'node:child_process';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { instructionVariants, type CountedVariant } from '../../bench/instructionVariants.js';
import { runScriptInstructions } from '../../bench/scriptInstructions.js';
import { startRedis, type TestRedis } from '../support/redis.js';

// The bench's instruction counts (npm run bench -- --script-cost --instructions): its functions
// are the plain fixed-window script's logic, so they must decide as the script does, and the
// counts must come from callgrind's intervals, one per variant.
async function call(redis: TestRedis, variant: CountedVariant, i: number): Promise<unknown> {
  const [numkeys, ...rest] = variant.args(i);
  if (variant.via === 'EVALSHA') return redis.client.eval(variant.code, numkeys!, ...rest);
  await redis.client.function('LOAD', 'REPLACE', variant.code);
  return redis.client.fcall(variant.fn!, numkeys!, ...rest);
}

/** A reply ({ allowed, remaining_1, reset_ms_1, ... }) without its reset times, which move with the clock. */
function decision(reply: unknown): unknown[] {
  const numbers = reply as number[];
  return numbers.filter((_, i) => i === 0 || i % 2 === 1);
}

describe('the script instruction bench', () => {
  let redis: TestRedis;
  beforeAll(async () => {
    redis = await startRedis();
  });
  afterAll(async () => {
    await redis?.stop();
  });

  it('runs every variant, and its functions decide as the plain script does', async () => {
    const variants = instructionVariants();
    for (const variant of variants) {
      await redis.client.flushall();
      expect(await call(redis, variant, 1)).toBeDefined();
    }
    const find = (id: string, via: string, counters: number) =>
      variants.find((v) => v.id === id && v.via === via && v.counters === counters)!;
    // Tenant 2's counters through the script, then through its function, and tenant 3's through
    // the packed one, 5 calls each from empty; again if a minute's window ended meanwhile.
    const through = async (counters: number) => {
      const started = Math.floor(Date.now() / 60_000);
      const replies: Record<string, unknown[][]> = { script: [], hash: [], packed: [] };
      await redis.client.flushall();
      for (let i = 0; i < 5; i += 1) {
        replies.script!.push(decision(await call(redis, find('plain', 'EVALSHA', counters), 2)));
      }
      await redis.client.flushall();
      for (let i = 0; i < 5; i += 1) {
        replies.hash!.push(decision(await call(redis, find('plain', 'FCALL', counters), 2)));
        replies.packed!.push(decision(await call(redis, find('packed', 'FCALL', counters), 3)));
      }
      return started === Math.floor(Date.now() / 60_000) ? replies : undefined;
    };
    for (const counters of [1, 3]) {
      const replies = (await through(counters)) ?? (await through(counters))!;
      expect(replies.script![4]).toEqual([1, ...Array(counters).fill(999_999_995)]);
      expect(replies.hash).toEqual(replies.script);
      expect(replies.packed).toEqual(replies.script);
      const hash = await redis.client.hgetall('tg:{2}:cost:0');
      const [t, w, c] = (await redis.client.get('tg:{3}:cost:0'))!.split(':');
      expect([w, c]).toEqual([hash.w, hash.c]);
      expect(Math.abs(Number(t) - Number(hash.t))).toBeLessThan(1_000);
      expect(await redis.client.pttl('tg:{3}:cost:0')).toBeGreaterThan(0);
    }
  });

  const valgrind = spawnSync('valgrind', ['--version']).status === 0;
  if (!valgrind) console.warn('valgrind is not on PATH: the callgrind count is not tested');
  it.skipIf(!valgrind)(
    'counts each variant in callgrind intervals that repeat, FCALL below EVALSHA',
    async () => {
      const rows = await runScriptInstructions(
        { warmUp: 50, measured: 200 },
        () => {},
        (variant) => variant.id === 'one',
      );
      expect(rows.map((row) => row.via)).toEqual(['EVALSHA', 'FCALL']);
      for (const row of rows) {
        // Thousands of instructions: `return 1` is more than nothing, and far from a script.
        expect(row.kilo).toBeGreaterThan(2);
        expect(row.kilo).toBeLessThan(50);
        // Lua's garbage collector steps every 50 calls or so: a half of 100 calls may hold one
        // step more than the other.
        expect(Math.abs(row.halves[0]! - row.halves[1]!)).toBeLessThan(row.kilo * 0.1);
      }
      expect(rows[1]!.kilo).toBeLessThan(rows[0]!.kilo);
    },
    60_000,
  );
});
