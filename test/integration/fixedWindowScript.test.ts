import fc from 'fast-check';
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { createMemoryStore } from '../../src/store/memoryStore.js';
import { decisionCode } from '../../src/store/library.js';
import {
  decideArgs,
  decideCall,
  loadDecisionScript,
  readDecision,
  scriptSha,
} from '../../src/store/script.js';
import { loadFixedWindowScript } from '../../src/store/fixedWindowScript.js';
import type { CounterCheck, Store, StoreDecision } from '../../src/store/Store.js';
import {
  CALL_PATHS,
  openPathStore,
  startRedis,
  type CallPath,
  type TestRedis,
} from '../support/redis.js';

// Requests whose every counter is a plain fixed window go to lua/plain_fixed_window.lua, the
// others to the decision script. Both scripts keep a counter in the same hash, so a counter that
// one wrote is continued by the other, as during a rolling deploy or when a request's descriptors
// change.

let redis: TestRedis;
let store: Store;
let batchingStore: Store;
const decision = loadDecisionScript();
const fixedWindow = loadFixedWindowScript();

beforeAll(async () => {
  redis = await startRedis();
});

afterAll(async () => {
  await redis?.stop();
});

beforeEach(async () => {
  await redis.client.flushall();
});

const W = 60_000;
const T0 = Math.ceil(1_800_000_000_000 / W) * W;

function fixed(key: string, limit: number, cost: number): CounterCheck {
  return {
    key,
    algorithm: 'fixed_window',
    windowMs: W,
    limit,
    burst: limit,
    cost,
    shadow: false,
    quota: false,
    overdraw: false,
  };
}

/**
 * One call of the script named, on the test's own connection. With `persist`, the keys' TTLs are
 * removed in the same transaction, which Redis runs on one snapshot of its clock: a trace on a
 * made-up clock must not lose a key because Redis's own clock ran out its TTL meanwhile (on a
 * busy machine, a few milliseconds between two steps can be a whole TTL). The counts do not need
 * the TTL: each key holds its window.
 */
async function run(
  script: 'decision' | 'fixedWindow',
  checks: CounterCheck[],
  nowMs: number,
  persist = false,
): Promise<StoreDecision> {
  const time = { nowMs, skewToleranceMs: 0 };
  const call =
    script === 'decision'
      ? {
          script,
          args: decideArgs(checks, time),
          read: (reply: unknown) => readDecision(reply, checks.length),
        }
      : decideCall(checks, time);
  expect(call.script).toBe(script);
  const [numKeys, ...rest] = call.args as [number, ...(string | number)[]];
  const lua = script === 'decision' ? decision : fixedWindow;
  if (!persist) return call.read(await redis.client.eval(lua, numKeys, ...rest));
  const transaction = redis.client.multi().eval(lua, numKeys, ...rest);
  for (const key of new Set(checks.map((check) => check.key))) transaction.persist(key);
  const [[error, reply]] = (await transaction.exec()) as [[Error | null, unknown]];
  if (error) throw error;
  return call.read(reply);
}

/**
 * The entry points that the calls of `act` ran, read from the slow log (which, at a threshold of
 * 0, logs every command with its first arguments).
 */
async function entriesRun(act: () => Promise<unknown>): Promise<string[]> {
  const { library } = decisionCode();
  const names = new Map<string, string>([
    [scriptSha(fixedWindow), 'fixedWindow'],
    [scriptSha(decision), 'decision'],
    [library.functions.fixedWindow, 'fixedWindow'],
    [library.functions.decision, 'decision'],
  ]);
  await redis.client.config('SET', 'slowlog-log-slower-than', '0');
  await redis.client.slowlog('RESET');
  await act();
  const log = (await redis.client.slowlog('GET', 1_000)) as [number, number, number, string[]][];
  await redis.client.config('SET', 'slowlog-log-slower-than', '10000');
  return log
    .map((entry) => entry[3])
    .filter(([command]) => /^(evalsha|eval|fcall)$/i.test(command ?? ''))
    .map(([command, name = '']) => {
      // EVAL's first argument is the script itself, cut short in the log: named by its first file.
      const entry = names.get(name) ?? (name.includes('plain_fixed_window') ? 'fixedWindow' : '?');
      return `${command!.toLowerCase()} ${name.includes('lib.lua') ? 'decision' : entry}`;
    })
    .reverse();
}

describe.each(CALL_PATHS)('the plain fixed-window script, calls as %s', (path: CallPath) => {
  beforeAll(async () => {
    store = await openPathStore(redis, path);
    batchingStore = await openPathStore(redis, path, { batchLimit: 7 });
  });

  afterAll(async () => {
    await store?.close();
    await batchingStore?.close();
  });

  it('runs the requests whose counters are all plain fixed windows, and only those', async () => {
    const via = path === 'functions' ? 'fcall' : 'evalsha';
    // After a SCRIPT FLUSH or FUNCTION FLUSH, as after a restart: the first call loads its code
    // by itself, and fails nothing.
    await redis.client.script('FLUSH');
    await redis.client.call('FUNCTION', 'FLUSH');
    expect(
      await entriesRun(() =>
        store.decide([fixed('only:{a}:1', 5, 1), fixed('only:{a}:2', 5, 1)], undefined),
      ),
    ).toEqual(
      path === 'functions'
        ? ['fcall fixedWindow', 'fcall fixedWindow']
        : // The EVALSHA that found no script is not logged; the EVAL after it loads it.
          ['eval fixedWindow'],
    );
    expect(
      await entriesRun(() =>
        store.decide([{ ...fixed('only:{a}:3', 5, 1), shadow: true }], undefined),
      ),
    ).toEqual([path === 'functions' ? 'fcall decision' : 'eval decision']);
    expect(await entriesRun(() => store.decide([fixed('only:{a}:4', 5, 1)], undefined))).toEqual([
      `${via} fixedWindow`,
    ]);
    // Scripts are not loaded where functions are called.
    const loaded = await redis.client.script('EXISTS', scriptSha(fixedWindow), scriptSha(decision));
    expect(loaded).toEqual(path === 'functions' ? [0, 0] : [1, 1]);
  });

  it('continues a counter that the decision script wrote, and the decision script continues it', async () => {
    const key = 'handover:{t}:1';
    expect((await run('decision', [fixed(key, 5, 2)], T0 + 1_000)).results[0]!.remaining).toBe(3);
    const ttl = await redis.client.pttl(key);
    // Same window: the count goes on, and the TTL that the window's first write set stays.
    const fast = await run('fixedWindow', [fixed(key, 5, 2)], T0 + 2_000);
    expect(fast).toEqual({
      allowed: true,
      results: [{ fits: true, remaining: 1, resetMs: W - 2_000 }],
    });
    expect(await redis.client.hgetall(key)).toEqual({
      t: String(T0 + 2_000),
      w: String(T0 / W),
      c: '4',
    });
    expect(await redis.client.pttl(key)).toBeLessThanOrEqual(ttl);
    const denied = await run('decision', [fixed(key, 5, 2)], T0 + 3_000);
    expect(denied).toEqual({
      allowed: false,
      results: [{ fits: false, remaining: 1, resetMs: W - 3_000 }],
    });
    expect(await run('decision', [fixed(key, 5, 1)], T0 + 3_000)).toMatchObject({ allowed: true });
    // The next window: the fixed-window script starts it afresh, with a TTL of its own.
    const next = await run('fixedWindow', [fixed(key, 5, 1)], T0 + W + 500);
    expect(next.results[0]).toEqual({ fits: true, remaining: 4, resetMs: W - 500 });
    expect(await redis.client.hget(key, 'w')).toBe(String(T0 / W + 1));
    expect(await redis.client.pttl(key)).toBeGreaterThan(W - 500 - 5_000);
    expect((await run('decision', [fixed(key, 5, 0)], T0 + W + 600)).results[0]!.remaining).toBe(4);
  });

  it('decides as the in-memory store on random traces, whichever script each step runs', async () => {
    let trace = 0;
    const counter = fc.record({
      windowMs: fc.constantFrom(1_000, 7_000, 60_000, 31_536_000_000),
      limit: fc.oneof(fc.integer({ min: 0, max: 8 }), fc.constant(4_294_967_295)),
    });
    const step = fc.record({
      advanceMs: fc.oneof(fc.integer({ min: 0, max: 50 }), fc.integer({ min: 0, max: 90_000 })),
      counters: fc.uniqueArray(fc.integer({ min: 0, max: 3 }), { minLength: 1, maxLength: 3 }),
      cost: fc.oneof(fc.integer({ min: 0, max: 4 }), fc.constant(2 ** 33)),
      twice: fc.option(fc.integer({ min: 0, max: 3 }), { freq: 3 }),
      script: fc.constantFrom('decision' as const, 'fixedWindow' as const),
    });
    await fc.assert(
      fc.asyncProperty(
        fc.array(counter, { minLength: 4, maxLength: 4 }),
        fc.boolean(),
        fc.array(step, { minLength: 1, maxLength: 30 }),
        fc.integer({ min: 1_600_000_000_000, max: 1_900_000_000_000 }),
        async (specs, reference, steps, start) => {
          trace += 1;
          let now = start;
          const memory = createMemoryStore({ clock: () => now });
          try {
            const calls: { checks: CounterCheck[]; nowMs: number }[] = [];
            for (const { advanceMs, counters, cost, twice, script } of steps) {
              now += advanceMs;
              const checks = counters.map((i) => ({
                ...fixed(`fw:{${trace}}:${i}`, specs[i]!.limit, cost),
                windowMs: specs[i]!.windowMs,
                ...(reference ? { reference: { stop: false, held: false, cached: false } } : {}),
              }));
              // The reference's counting sends descriptors of one counter unmerged.
              if (reference && twice !== null) checks.push({ ...checks[0]!, cost: twice });
              calls.push({ checks, nowMs: now });
              expect(await run(script, checks, now, true)).toEqual(
                await memory.decide(checks, now),
              );
            }
            // Again from nothing, all at once: batch calls of the fixed-window script.
            const written = await redis.client.keys(`fw:{${trace}}:*`);
            if (written.length > 0) await redis.client.del(...written);
            const batched = await Promise.all(
              calls.map(({ checks, nowMs }) => batchingStore.decide(checks, nowMs)),
            );
            const replayed = createMemoryStore({ clock: () => now });
            const expected = [];
            for (const { checks, nowMs } of calls)
              expected.push(await replayed.decide(checks, nowMs));
            await replayed.close();
            expect(batched).toEqual(expected);
          } finally {
            await memory.close();
          }
        },
      ),
      { numRuns: 150 },
    );
  }, 120_000);

  it('fails only the request whose counter is not a counter, alone and in a batch, writing none of it', async () => {
    await redis.client.set('bad:{x}:1', 'not a counter');
    const bad = [fixed('bad:{x}:2', 5, 1), fixed('bad:{x}:1', 5, 1)];
    await expect(store.decide(bad, undefined)).rejects.toMatchObject({ kind: 'wrong_type' });
    const [failed, decided] = await Promise.allSettled([
      batchingStore.decide(bad, undefined),
      batchingStore.decide([fixed('good:{y}:1', 5, 1)], undefined),
    ]);
    expect(failed).toMatchObject({ status: 'rejected', reason: { kind: 'wrong_type' } });
    expect(decided).toMatchObject({ status: 'fulfilled', value: { allowed: true } });
    expect(await redis.client.exists('bad:{x}:2')).toBe(0);
    expect(await redis.client.get('bad:{x}:1')).toBe('not a counter');
    // A hash of other fields is not a counter either.
    await redis.client.hset('bad:{x}:3', 't', 'yesterday', 'c', 'x');
    await expect(store.decide([fixed('bad:{x}:3', 5, 1)], undefined)).rejects.toMatchObject({
      kind: 'wrong_type',
    });
  });

  it('names the command that a Redis user may not run, as the decision script does', async () => {
    const commands = ['+evalsha', '+eval', '+hmget', '+hset', '+time', '+ping'];
    if (path === 'functions') commands.push('+fcall', '+function|load');
    await redis.client.call(
      'ACL',
      'SETUSER',
      'nopexpire',
      'reset',
      'on',
      '>secret',
      '~*',
      ...commands,
    );
    const limited = await openPathStore(
      redis,
      path,
      {},
      { username: 'nopexpire', password: 'secret' },
    );
    try {
      // A new counter's first write sets its TTL, which this user may not.
      await expect(limited.decide([fixed('acl:{z}:1', 5, 1)], undefined)).rejects.toMatchObject({
        kind: 'permission',
        message: expect.stringContaining("'pexpire'"),
      });
    } finally {
      await limited.close();
    }
  });
});
