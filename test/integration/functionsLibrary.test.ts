import type * as FileSystem from 'node:fs';
import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest';
import { decisionCode } from '../../src/store/library.js';
import type * as RedisStoreModule from '../../src/store/redisStore.js';
import type { RedisStore } from '../../src/store/redisStore.js';
import type { CounterCheck, Store, StoreDecision } from '../../src/store/Store.js';
import { waitFor } from '../support/redisCluster.js';
import { openPathStore, startRedis, storeSettings, type TestRedis } from '../support/redis.js';

// tollgate's function library on a real Redis, through what happens to it in production: another
// version's library beside it (a rolling upgrade), a deletion by mistake, FUNCTION FLUSH while
// checks are under way, and a restart that lost every function. No check fails, and every count
// stays exact.

let redis: TestRedis;

beforeAll(async () => {
  redis = await startRedis();
});

afterAll(async () => {
  await redis?.stop();
});

const HOUR = 3_600_000;

function counter(key: string, limit: number): CounterCheck {
  return {
    key,
    algorithm: 'sliding_window',
    windowMs: HOUR,
    limit,
    burst: limit,
    cost: 1,
    shadow: false,
    quota: false,
    overdraw: false,
  };
}

/** The libraries named tollgate_* on this Redis, by name, with their code (a glob, as docs/redis.md
 * gives it: LIBRARYNAME matches a pattern, not a prefix). */
async function libraries(): Promise<Map<string, string>> {
  const listed = (await redis.client.call(
    'FUNCTION',
    'LIST',
    'LIBRARYNAME',
    'tollgate_*',
    'WITHCODE',
  )) as unknown[][];
  const found = new Map<string, string>();
  for (const entry of listed) {
    const fields = new Map<unknown, unknown>();
    for (let i = 0; i + 1 < entry.length; i += 2) fields.set(entry[i], entry[i + 1]);
    found.set(String(fields.get('library_name')), String(fields.get('library_code')));
  }
  return found;
}

async function commandCalls(command: string): Promise<number> {
  const info = await redis.client.info('commandstats');
  const escaped = command.replace('|', '\\|');
  return Number(new RegExp(`^cmdstat_${escaped}:calls=(\\d+)`, 'm').exec(info)?.[1] ?? 0);
}

/**
 * The store module of another version of tollgate: the same code, but its lua/dispatch.lua ends
 * with one comment more, so its library has another hash, and so another name.
 */
async function anotherVersion(): Promise<typeof RedisStoreModule> {
  vi.resetModules();
  vi.doMock('node:fs', async (importOriginal) => {
    const fs = await importOriginal<typeof FileSystem>();
    const readFileSync = ((path: string, options: BufferEncoding) => {
      const text = fs.readFileSync(path, options);
      return String(path).endsWith('/lua/dispatch.lua') ? `${text}-- another version\n` : text;
    }) as typeof fs.readFileSync;
    return { ...fs, readFileSync, default: { ...fs, readFileSync } };
  });
  try {
    return await import('../../src/store/redisStore.js');
  } finally {
    vi.doUnmock('node:fs');
    vi.resetModules();
  }
}

describe('two versions side by side', () => {
  let current: RedisStore;
  let other: RedisStore;

  beforeAll(async () => {
    current = (await openPathStore(redis, 'functions')) as RedisStore;
    const { createRedisStore } = await anotherVersion();
    other = createRedisStore(storeSettings(redis), { functions: 'on' });
    await other.firstConnection();
  });

  afterAll(async () => {
    await current?.close();
    await other?.close();
  });

  it('each calls its own library, and both decide on the same counters', async () => {
    const ours = decisionCode().library;
    expect(current.codePath()).toEqual({ kind: 'functions', detail: ours.name });
    expect(other.codePath().kind).toBe('functions');
    const theirs = other.codePath().detail;
    expect(theirs).toMatch(/^tollgate_[0-9a-f]{16}$/);
    expect(theirs).not.toBe(ours.name);

    const listed = await libraries();
    expect([...listed.keys()].sort()).toEqual([ours.name, theirs].sort());
    // Neither load replaced the other's code.
    expect(listed.get(ours.name)).toBe(ours.code);
    expect(listed.get(theirs)).toContain('-- another version');

    const check = counter('sides:{shared}', 25);
    const decided: StoreDecision[] = [];
    for (let i = 0; i < 40; i++) {
      decided.push(await (i % 2 === 0 ? current : other).decide([check], undefined));
    }
    expect(decided.map((d) => d.allowed)).toEqual(Array.from({ length: 40 }, (_, i) => i < 25));
    expect(decided.slice(0, 25).map((d) => d.results[0]!.remaining)).toEqual(
      Array.from({ length: 25 }, (_, i) => 24 - i),
    );
  });

  it.each([
    ['ours', () => current, () => other],
    ['the other version’s', () => other, () => current],
  ])('%s, deleted, is loaded again by its next call, and the other stays', async (_, of, not) => {
    const store = of();
    const name = store.codePath().detail;
    const kept = not().codePath().detail;
    await redis.client.call('FUNCTION', 'DELETE', name);
    expect([...(await libraries()).keys()]).toEqual([kept]);

    const check = counter(`sides:{deleted-${name}}`, 3);
    const answers = [];
    for (let i = 0; i < 4; i++) answers.push((await store.decide([check], undefined)).allowed);
    expect(answers).toEqual([true, true, true, false]);
    expect([...(await libraries()).keys()].sort()).toEqual([name, kept].sort());
    expect((await not().decide([check], undefined)).allowed).toBe(false);
  });
});

describe('a lost library', () => {
  it('FUNCTION FLUSH while checks are under way fails none, and counts stay exact', async () => {
    const stores: Store[] = [
      await openPathStore(redis, 'functions'),
      await openPathStore(redis, 'functions', { batchLimit: 7 }),
    ];
    try {
      const loads = await commandCalls('function|load');
      const check = counter('lost:{flushed}', 250);
      let allowed = 0;
      const failures: string[] = [];
      const decide = (store: Store) =>
        store.decide([check], undefined).then(
          (decision) => void (decision.allowed && (allowed += 1)),
          (error: unknown) => void failures.push(String(error)),
        );
      // Rounds of 60 checks at once with a flush sent beside them, which lands before some of
      // them or after all. Each round starts with the library loaded (by a check of each store,
      // which finds it missing when the last flush came after every call of its round): a call
      // that loaded the library and runs again finds it there unless a second flush came in the
      // meantime, which is the one loss a call does not survive.
      for (let round = 0; round < 6; round++) {
        for (const store of stores) await decide(store);
        const calls = Array.from({ length: 60 }, (_, i) => decide(stores[i % 2]!));
        await redis.client.call('FUNCTION', 'FLUSH', round % 2 === 0 ? 'SYNC' : 'ASYNC');
        await Promise.all(calls);
      }
      expect(failures).toEqual([]);
      expect(allowed).toBe(250);
      // The library was lost and loaded again, at most once per store and flush.
      const loadedAgain = (await commandCalls('function|load')) - loads;
      expect(loadedAgain).toBeGreaterThanOrEqual(5);
      expect(loadedAgain).toBeLessThanOrEqual(2 * 6);
    } finally {
      for (const store of stores) await store.close();
    }
  });

  it('a restart without persistence: the next call loads the library again', async () => {
    const store = await openPathStore(redis, 'functions');
    try {
      const check = counter('lost:{restarted}', 2);
      expect((await store.decide([check], undefined)).allowed).toBe(true);
      await redis.restart();
      expect((await libraries()).size).toBe(0);
      await waitFor(() => store.ping().then(() => true));
      // Redis forgot the counter with everything else; the call finds the library missing too.
      const answers = [];
      for (let i = 0; i < 3; i++) answers.push((await store.decide([check], undefined)).allowed);
      expect(answers).toEqual([true, true, false]);
      expect([...(await libraries()).keys()]).toEqual([decisionCode().library.name]);
      expect(await commandCalls('function|load')).toBe(1);
    } finally {
      await store.close();
    }
  });
});
