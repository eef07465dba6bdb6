import { decisionCalls } from '../support/redis.js';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { StoreError } from '../../src/core/errors.js';
import { createRedisStore } from '../../src/store/redisStore.js';
import { keySlot } from '../../src/store/slots.js';
import type { CounterCheck, Store } from '../../src/store/Store.js';
import {
  clusterStoreSettings,
  startRedisCluster,
  waitFor,
  type TestCluster,
} from '../support/redisCluster.js';
import { codes, d, eventually, healthStatus, startTollgate } from '../support/tollgate.js';

// REDIS_BATCH_LIMIT on Redis Cluster: requests whose counters share a slot, made together, go to
// that slot's master as one script call, decided in the order made. A script may only declare
// keys of one slot, so batches are per slot: one tenant's requests share one.

const HOUR = 3_600_000;

let cluster: TestCluster;
const stores: Store[] = [];

beforeAll(async () => {
  cluster = await startRedisCluster();
}, 60_000);
afterAll(() => cluster?.stop());
afterEach(async () => {
  await Promise.all(stores.splice(0).map((store) => store.close()));
});

async function storeWith(batchLimit: number, timeoutMs = 2_000): Promise<Store> {
  const store = createRedisStore(clusterStoreSettings(cluster, timeoutMs), { batchLimit });
  stores.push(store);
  await waitFor(() => store.ping().then(() => true));
  return store;
}

const counter = (key: string, limit: number): CounterCheck => ({
  key,
  algorithm: 'sliding_window',
  windowMs: HOUR,
  limit,
  burst: limit,
  cost: 1,
  shadow: false,
  quota: false,
  overdraw: false,
});

/** Decision calls (FCALL, EVALSHA and EVAL) that ran on every master. */
async function scriptCalls(): Promise<number> {
  let calls = 0;
  for (const node of await cluster.nodes()) {
    if (node.role === 'master') calls += await decisionCalls(cluster.client(node.port));
  }
  return calls;
}

async function resetStats(): Promise<void> {
  await Promise.all(cluster.ports.map((port) => cluster.client(port).config('RESETSTAT')));
}

/** Loads the decision script on the store's connection to `key`'s master, outside the counts. */
async function warm(store: Store, key: string): Promise<void> {
  await store.decide([{ ...counter(`${key}-warm`, 1), cost: 0 }], undefined);
  await resetStats();
}

describe('with REDIS_BATCH_LIMIT=16 on a cluster', () => {
  it('decides 200 checks of one tenant made at once in 13 script calls, exactly, in the order made', async () => {
    const store = await storeWith(16);
    const key = 'tg:{batch-exact}hot';
    await warm(store, key);
    const decisions = await Promise.all(
      Array.from({ length: 200 }, () => store.decide([counter(key, 100)], undefined)),
    );
    expect(await scriptCalls()).toBe(13);
    expect(decisions.map((decision) => decision.allowed)).toEqual(
      Array.from({ length: 200 }, (_, i) => i < 100),
    );
    expect(decisions.slice(0, 100).map((decision) => decision.results[0]?.remaining)).toEqual(
      Array.from({ length: 100 }, (_, i) => 99 - i),
    );
  });

  it('batches only checks of one slot: two tenants on two slots, and a check across both, apart', async () => {
    const store = await storeWith(16);
    const [a, b] = ['tg:{batch-a}x', 'tg:{batch-b}x'];
    expect(keySlot(a)).not.toBe(keySlot(b));
    await warm(store, a);
    await store.decide([{ ...counter(b, 1), cost: 0 }], undefined);
    await resetStats();
    const decisions = await Promise.all([
      ...Array.from({ length: 10 }, () => store.decide([counter(a, 100)], undefined)),
      ...Array.from({ length: 10 }, () => store.decide([counter(b, 100)], undefined)),
      store.decide([counter(a, 100), counter(b, 100)], undefined),
    ]);
    // One batch per slot, and the request across slots one call on each.
    expect(await scriptCalls()).toBe(4);
    expect(decisions.every((decision) => decision.allowed)).toBe(true);
    const read = await store.decide([{ ...counter(a, 100), cost: 0 }], undefined);
    expect(read.results[0]!.remaining).toBe(89);
    const readB = await store.decide([{ ...counter(b, 100), cost: 0 }], undefined);
    expect(readB.results[0]!.remaining).toBe(89);
  });

  it('fails only the checks whose counter is foreign, in a batch shared with others', async () => {
    const store = await storeWith(16);
    const shared = 'tg:{batch-foreign}shared';
    const foreign = 'tg:{batch-foreign}foreign';
    const master = await cluster.masterOf(keySlot(foreign));
    await cluster.client(master.port).set(foreign, 'not a counter');
    await warm(store, shared);
    const outcomes = await Promise.allSettled(
      Array.from({ length: 16 }, (_, i) =>
        store.decide(
          i % 4 === 1 ? [counter(shared, 100), counter(foreign, 100)] : [counter(shared, 100)],
          undefined,
        ),
      ),
    );
    expect(await scriptCalls()).toBe(1);
    outcomes.forEach((outcome, i) => {
      if (i % 4 === 1) {
        expect(outcome.status).toBe('rejected');
        const reason = (outcome as PromiseRejectedResult).reason as StoreError;
        expect(reason).toBeInstanceOf(StoreError);
        expect(reason.kind).toBe('wrong_type');
      } else {
        expect(outcome.status).toBe('fulfilled');
      }
    });
    // The failed checks consumed nothing: the 12 others took 12.
    const after = await store.decide([{ ...counter(shared, 100), cost: 0 }], undefined);
    expect(after.results[0]!.remaining).toBe(88);
    expect(await cluster.client(master.port).get(foreign)).toBe('not a counter');
  });
});

describe('the service on a cluster', () => {
  it('admits exactly 100 of 200 concurrent checks of one tenant, in fewer script calls than checks', async () => {
    const tollgate = await startTollgate({
      rules: `
domain: api
tenant_key: tenant
descriptors:
  - key: tenant
    rate_limit: {unit: hour, requests_per_unit: 100}
`,
      env: { REDIS_TYPE: 'cluster', REDIS_URL: cluster.url, REDIS_TIMEOUT: '5s' },
      // Only the probe at start-up: a probe is a script call too.
      healthIntervalMs: HOUR,
    });
    try {
      await eventually(async () => (await healthStatus(tollgate.address)) === 'SERVING', 10_000);
      await resetStats();
      const request = { domain: 'api', descriptors: [d('tenant', 'batch-service')] };
      const responses = await Promise.all(
        Array.from({ length: 200 }, () => tollgate.check(request, 30_000)),
      );
      const answers = responses.map((response) => codes(response)[0]);
      expect(answers.filter((answer) => answer === 'OK')).toHaveLength(100);
      expect(answers.filter((answer) => answer === 'OVER_LIMIT')).toHaveLength(100);
      const calls = await scriptCalls();
      console.log(`200 concurrent checks of one tenant: ${calls} script calls`);
      expect(calls).toBeLessThan(100);
    } finally {
      await tollgate.stop();
    }
  });
});

describe('a batch during a slot migration', () => {
  it('is decided once, wherever it runs: the limit is admitted exactly and consumed exactly', async () => {
    const LIMIT = 300;
    const store = await storeWith(16, 5_000);
    // Two counters of one tenant: while they are split between the nodes, Redis answers TRYAGAIN
    // to a call that holds both, until they are on one node again.
    const gate = counter('tg:{batch-moving}gate', LIMIT);
    const tally = counter('tg:{batch-moving}tally', 1_000_000);
    const slot = keySlot(gate.key);
    await warm(store, gate.key);
    // Both counters exist before the move, so that it moves them one after the other.
    expect((await store.decide([gate, tally], undefined)).allowed).toBe(true);
    const { source, target, run } = await cluster.migration(slot);
    await resetStats();

    let allowed = 1;
    let made = 1;
    const failures: unknown[] = [];
    let moved = false;
    const waves: Promise<void>[] = [];
    const migrated = (async () => {
      try {
        await waitFor(async () => allowed >= LIMIT / 3);
        await run(250);
      } finally {
        moved = true;
      }
    })();
    // A wave of 16 checks (one batch) every 20 ms, until a while after the move.
    for (let stopAt = Infinity; Date.now() < stopAt;) {
      if (moved && stopAt === Infinity) stopAt = Date.now() + 300;
      made += 16;
      const wave = Array.from({ length: 16 }, () => store.decide([gate, tally], undefined));
      waves.push(
        Promise.allSettled(wave).then((outcomes) => {
          for (const outcome of outcomes) {
            if (outcome.status === 'rejected') failures.push(outcome.reason);
            else if (outcome.value.allowed) allowed += 1;
          }
        }),
      );
      await new Promise((resolve) => setTimeout(resolve, 20));
    }
    await migrated;
    await Promise.all(waves);

    const errors: Record<string, number> = {};
    for (const port of [source.port, target.port]) {
      const info = await cluster.client(port).info('errorstats');
      for (const [, name, count] of info.matchAll(
        /^errorstat_(ASK|TRYAGAIN|MOVED):count=(\d+)/gm,
      )) {
        errors[name!] = (errors[name!] ?? 0) + Number(count);
      }
    }
    const calls = await scriptCalls();
    console.log(
      `slot migration: ${made} checks in ${calls} script calls, redirections ${JSON.stringify(errors)}`,
    );
    expect(failures).toEqual([]);
    // The batches met the migration, and were batches.
    expect((errors.TRYAGAIN ?? 0) + (errors.ASK ?? 0)).toBeGreaterThan(0);
    expect(calls).toBeLessThan(made / 4);
    expect(allowed).toBe(LIMIT);
    const after = await store.decide(
      [
        { ...gate, cost: 0 },
        { ...tally, cost: 0 },
      ],
      undefined,
    );
    // Every allowed check consumed the tally once: none counted twice, none lost.
    expect(after.results.map((result) => result.remaining)).toEqual([0, 1_000_000 - LIMIT]);
    expect((await cluster.masterOf(slot)).id).toBe(target.id);
    await cluster.settled();
  }, 60_000);
});
