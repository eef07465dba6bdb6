import { decisionCalls } from '../support/redis.js';
import fc from 'fast-check';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { counterKey } from '../../src/store/keys.js';
import type { Algorithm } from '../../src/rules/types.js';
import { createMemoryStore } from '../../src/store/memoryStore.js';
import { createRedisStore } from '../../src/store/redisStore.js';
import {
  decideArgs,
  loadDecisionScript,
  readPartDecision,
  refundArgs,
} from '../../src/store/script.js';
import { keySlot } from '../../src/store/slots.js';
import type { CounterCheck, Store } from '../../src/store/Store.js';
import type { RateLimitRequestObject } from '@tollgate/client';
import { spawnTollgate, type TollgateProcess } from '../support/processes.js';
import { raceRules } from '../support/raceRules.js';
import {
  clusterStoreSettings,
  loadSummary,
  startRedisCluster,
  underLoad,
  waitFor,
  type LoadCall,
  type TestCluster,
} from '../support/redisCluster.js';
import {
  callCheck,
  codes,
  d,
  eventually,
  healthStatus,
  startTollgate,
  type Tollgate,
} from '../support/tollgate.js';

// tollgate on a real Redis Cluster of three masters and three replicas. A request whose counters
// share a slot is one script call on one node; a request across slots is one call per slot, all
// or nothing, with a refund when a slot denies. Counts stay exact across instances, and a slot
// migration or a coordinated failover under load answers every call in time and admits no more
// than the limit.

const HOUR = 3_600_000;
const RULES = `
domain: api
tenant_key: tenant
descriptors:
  - key: tenant
    rate_limit: {unit: hour, requests_per_unit: 1000}
    descriptors:
      - key: route
        rate_limit: {unit: hour, requests_per_unit: 500, algorithm: token_bucket}
  - key: fixed_window
    rate_limit: {unit: hour, requests_per_unit: 1000, algorithm: fixed_window}
  - key: sliding_window
    rate_limit: {unit: hour, requests_per_unit: 1000, algorithm: sliding_window}
  - key: token_bucket
    rate_limit: {unit: hour, requests_per_unit: 1000, algorithm: token_bucket}
  - key: remote_address
    rate_limit: {unit: hour, requests_per_unit: 2, algorithm: fixed_window}
  - key: mover
    rate_limit: {unit: hour, requests_per_unit: 300, algorithm: fixed_window}
    descriptors:
      - key: route
        rate_limit: {unit: hour, requests_per_unit: 100000, algorithm: sliding_window}
`;
const FAULT_TIMEOUT_MS = 250;
const MARGIN_MS = 750;

let cluster: TestCluster;
let tollgate: Tollgate | undefined;

beforeAll(async () => {
  cluster = await startRedisCluster();
}, 60_000);
afterAll(() => cluster?.stop());
afterEach(async () => {
  await tollgate?.stop();
  tollgate = undefined;
});

async function startOnCluster(
  env: Record<string, string> = {},
  healthIntervalMs?: number,
): Promise<Tollgate> {
  const started = await startTollgate({
    rules: RULES,
    env: { REDIS_TYPE: 'cluster', REDIS_URL: cluster.url, ...env },
    healthIntervalMs,
  });
  await eventually(async () => (await healthStatus(started.address)) === 'SERVING', 10_000);
  return started;
}

/** The slot of a descriptor's counter under RULES. */
function slotOf(entries: [string, string][], algorithm: Algorithm, tenantKey?: string): number {
  const key = counterKey(
    '',
    'api',
    entries.map(([k, value]) => ({ key: k, value })),
    tenantKey,
    algorithm,
    HOUR,
  );
  return keySlot(key);
}

/** Decision calls (FCALL, EVALSHA and EVAL) per master port. */
async function scriptCalls(): Promise<Map<number, number>> {
  const calls = new Map<number, number>();
  for (const node of await cluster.nodes()) {
    if (node.role === 'master')
      calls.set(node.port, await decisionCalls(cluster.client(node.port)));
  }
  return calls;
}

/** MOVED, ASK, TRYAGAIN and NOSCRIPT replies of every node since the last reset, from INFO errorstats. */
async function redirections(): Promise<string> {
  const counts: Record<string, number> = {};
  for (const port of cluster.ports) {
    const info = await cluster.client(port).info('errorstats');
    for (const [, name, count] of info.matchAll(
      /^errorstat_(MOVED|ASK|TRYAGAIN|NOSCRIPT):count=(\d+)/gm,
    )) {
      counts[name!] = (counts[name!] ?? 0) + Number(count);
    }
  }
  return JSON.stringify(counts);
}

async function resetStats(): Promise<void> {
  await Promise.all(cluster.ports.map((port) => cluster.client(port).config('RESETSTAT')));
}

/** A remote address of network `net` whose counter lives on another master than `slot`. */
async function addressAwayFrom(slot: number, net: number): Promise<string> {
  const master = (await cluster.masterOf(slot)).port;
  for (let i = 1; ; i++) {
    const address = `10.${net}.0.${i}`;
    const other = slotOf([['remote_address', address]], 'fixed_window');
    if ((await cluster.masterOf(other)).port !== master) return address;
  }
}

describe('slots', () => {
  it("computes the slot Redis computes, hash tags and tollgate's escaped tenants included", async () => {
    const keys = [
      'plain',
      '{tag}rest',
      'foo{}{bar}',
      '{bar',
      'a{b}c{d}',
      counterKey('', 'api', [{ key: 'tenant', value: 'a{b}\\c' }], undefined, 'token_bucket', 1),
      counterKey('p:', 'ü', [{ key: 'k', value: '🚦' }], undefined, 'sliding_window', 60_000),
    ];
    for (const key of keys) {
      expect(keySlot(key)).toBe(
        Number(await cluster.client(cluster.ports[0]!).cluster('KEYSLOT', key)),
      );
    }
  });
});

describe('a request within one slot', () => {
  it('is one script call on the one master of its tenant', async () => {
    // Health probes only at start: on a busy machine the ten checks can outlast a probe's second,
    // and a probe is a script call too.
    tollgate = await startOnCluster({ CLOCK: 'redis' }, HOUR);
    const request = {
      domain: 'api',
      descriptors: [d('tenant', 'acme'), d('tenant', 'acme', 'route', '/orders')],
    };
    await tollgate.check(request); // loads the script on that node's connection
    await resetStats();
    for (let i = 0; i < 10; i++) expect(codes(await tollgate.check(request))[0]).toBe('OK');
    const calls = [...(await scriptCalls()).values()];
    expect(calls.reduce((a, b) => a + b, 0)).toBe(10);
    expect(calls).toContain(10);
  });
});

describe('refunds and overdraws on a cluster', () => {
  it('leave the counts they leave on one Redis, through the service', async () => {
    tollgate = await startOnCluster();
    const tg = tollgate;
    const spend = (hits: number, negative = false) =>
      tg.check({
        domain: 'api',
        descriptors: [
          {
            ...d('fixed_window', 'refunds'),
            hits_addend: { value: String(hits) },
            ...(negative ? { is_negative_hits: true } : {}),
          },
        ],
      });
    const left = async (hits: number, negative = false) =>
      (await spend(hits, negative)).statuses?.[0]?.limit_remaining;
    expect(await left(900)).toBe(100);
    expect(await left(300, true)).toBe(400);
    expect(await left(0)).toBe(400);
    expect(codes(await spend(500))).toEqual(['OVER_LIMIT', 'OVER_LIMIT']);
    expect(await left(2_000, true)).toBe(1000);
    // A refund in a request across slots stands, whatever the other slot decides.
    const other = await addressAwayFrom(slotOf([['fixed_window', 'refunds']], 'fixed_window'), 9);
    await tg.check({ domain: 'api', descriptors: [d('remote_address', other)] });
    await tg.check({ domain: 'api', descriptors: [d('remote_address', other)] });
    const across = await tg.check({
      domain: 'api',
      descriptors: [
        { ...d('fixed_window', 'refunds'), hits_addend: { value: '5' }, is_negative_hits: true },
        d('remote_address', other),
      ],
    });
    expect(codes(across)).toEqual(['OVER_LIMIT', 'OK', 'OVER_LIMIT']);
    expect(await left(0)).toBe(1000);
  });
});

describe('a request across slots', () => {
  it('is one call per slot when every slot allows, and nothing is refunded', async () => {
    tollgate = await startOnCluster();
    const tenantSlot = slotOf([['tenant', 'globex']], 'sliding_window', 'tenant');
    const address = await addressAwayFrom(tenantSlot, 1);
    const tenantMaster = (await cluster.masterOf(tenantSlot)).port;
    const request = {
      domain: 'api',
      descriptors: [d('tenant', 'globex'), d('remote_address', address)],
    };
    await resetStats();
    const first = await tollgate.check(request);
    const second = await tollgate.check(request);
    expect(codes(first)).toEqual(['OK', 'OK', 'OK']);
    expect(codes(second)).toEqual(['OK', 'OK', 'OK']);
    expect(second.statuses!.map((status) => status.limit_remaining)).toEqual([998, 0]);
    const calls = await scriptCalls();
    // Two requests of two slots on two masters: two calls each, the first perhaps an EVAL.
    expect([...calls.values()].reduce((a, b) => a + b, 0)).toBe(4);
    expect(calls.get(tenantMaster)).toBe(2);
  });

  describe.each(['fixed_window', 'sliding_window', 'token_bucket'] as const)(
    'when another slot denies, the %s counter',
    (algorithm) => {
      it('is refunded: OVER_LIMIT, reported unchanged, and unchanged afterwards', async () => {
        tollgate = await startOnCluster();
        const tenant = `refund-${algorithm}`;
        const slot = slotOf([[algorithm, tenant]], algorithm);
        const address = await addressAwayFrom(
          slot,
          ['fixed_window', 'sliding_window', 'token_bucket'].indexOf(algorithm) + 2,
        );
        const master = (await cluster.masterOf(slot)).port;
        const both = {
          domain: 'api',
          descriptors: [d(algorithm, tenant), d('remote_address', address)],
        };
        const alone = { domain: 'api', descriptors: [d(algorithm, tenant)] };
        expect(codes(await tollgate.check(both))[0]).toBe('OK');
        expect(codes(await tollgate.check(both))[0]).toBe('OK');

        await resetStats();
        const denied = await tollgate.check(both);
        expect(codes(denied)).toEqual(['OVER_LIMIT', 'OK', 'OVER_LIMIT']);
        expect(denied.statuses![0]!.limit_remaining).toBe(998);
        // The tenant's master ran the decision and then the refund.
        await waitFor(async () => (await scriptCalls()).get(master) === 2, 5_000);
        // Nothing of the denied request stayed consumed.
        expect((await tollgate.check(alone)).statuses![0]!.limit_remaining).toBe(997);
      });
    },
  );
});

describe('a refund after time moved on', () => {
  const W = 60_000;
  const T0 = Math.ceil(1_900_000_000_000 / W) * W + 1_000;
  const script = loadDecisionScript();
  const counter = (algorithm: Algorithm, cost: number): CounterCheck => ({
    key: `refund:{${algorithm}-${T0}}`,
    algorithm,
    windowMs: W,
    limit: 10,
    burst: 10,
    cost,
    shadow: false,
    quota: false,
    overdraw: false,
  });
  async function run(args: (string | number)[], key: string): Promise<unknown> {
    const master = await cluster.masterOf(keySlot(key));
    return cluster.client(master.port).eval(script, ...(args as [number, ...string[]]));
  }
  const decide = async (check: CounterCheck, at: number) =>
    readPartDecision(
      await run(decideArgs([check], { nowMs: at, skewToleranceMs: 0 }, true), check.key),
      1,
    );
  const refund = async (check: CounterCheck, at: number) =>
    (await run(refundArgs([check], at), check.key)) as number[];

  it('is skipped for a fixed window that has rolled over', async () => {
    const spent = counter('fixed_window', 3);
    await decide(spent, T0);
    await decide(counter('fixed_window', 1), T0 + W);
    expect(await refund(spent, T0)).toEqual([0]);
    expect((await decide(counter('fixed_window', 0), T0 + W)).results[0]!.remaining).toBe(9);
  });

  it("comes off the previous window's count for a sliding window, and is skipped two windows on", async () => {
    const spent = counter('sliding_window', 3);
    await decide(spent, T0);
    // A quarter into the next window, 3 spent in the last one still weigh ceil(3 * 3/4) = 3.
    const next = await decide(counter('sliding_window', 1), T0 + W + W / 4);
    expect(next.results[0]!.remaining).toBe(6);
    expect(await refund(spent, T0)).toEqual([1]);
    const probe = counter('sliding_window', 0);
    expect((await decide(probe, T0 + W + W / 4)).results[0]!.remaining).toBe(9);
    await decide(counter('sliding_window', 2), T0 + 2 * W);
    expect(await refund(counter('sliding_window', 1), T0 + W)).toEqual([1]);
    expect(await refund(spent, T0)).toEqual([0]);
    expect((await decide(probe, T0 + 2 * W)).results[0]!.remaining).toBe(8);
  });

  it('goes back into a token bucket less what refilled since, capped at the burst', async () => {
    // 10 tokens a minute: one every 6 s.
    const spent = counter('token_bucket', 5);
    await decide(spent, T0);
    // 1.2 s later a fifth of a token has refilled and one more is taken.
    await decide(counter('token_bucket', 1), T0 + 1_200);
    expect(await refund(spent, T0)).toEqual([1]);
    // Without the 5, the bucket would have stayed full until the 1 was taken: 9 left, exactly.
    const probe = await decide(counter('token_bucket', 0), T0 + 1_200);
    expect(probe.results[0]!.remaining).toBe(9);
    expect(probe.results[0]!.resetMs).toBe(6_000);
  });
});

describe('the cluster store and the in-memory store', () => {
  let store: Store;
  beforeAll(async () => {
    store = createRedisStore(clusterStoreSettings(cluster));
    await waitFor(() => store.ping().then(() => true));
  });
  afterAll(() => store?.close());

  it('give identical decisions on random traces whose counters span slots', async () => {
    const algorithm = fc.constantFrom<Algorithm>('fixed_window', 'sliding_window', 'token_bucket');
    const spec = fc.record({
      algorithm,
      windowMs: fc.constantFrom(1_000, 60_000, 3_600_000),
      limit: fc.integer({ min: 0, max: 6 }),
      extraBurst: fc.integer({ min: 0, max: 3 }),
      shadow: fc.boolean(),
      quota: fc.boolean(),
      overdraw: fc.boolean(),
      // COMPAT_MODE=reference's counting, for fixed windows: never refunded. Without
      // STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT, which judges "would go over" slot by slot here.
      reference: fc.option(fc.record({ cached: fc.boolean() }), { freq: 2 }),
    });
    const step = fc.record({
      advanceMs: fc.oneof(fc.integer({ min: 0, max: 50 }), fc.integer({ min: 0, max: 90_000 })),
      counters: fc.uniqueArray(fc.integer({ min: 0, max: 3 }), { minLength: 1, maxLength: 4 }),
      cost: fc.integer({ min: 0, max: 3 }),
      /** A refund (is_negative_hits) of one of the counters, in its own slot's call. */
      giveBack: fc.option(
        fc.record({
          counter: fc.integer({ min: 0, max: 3 }),
          cost: fc.integer({ min: 0, max: 4 }),
        }),
        { freq: 3 },
      ),
    });
    let run = 0;
    await fc.assert(
      fc.asyncProperty(
        fc.array(spec, { minLength: 4, maxLength: 4 }),
        fc.array(step, { minLength: 1, maxLength: 30 }),
        fc.integer({ min: 1_600_000_000_000, max: 1_900_000_000_000 }),
        async (specs, steps, start) => {
          run += 1;
          let now = start;
          const memory = createMemoryStore({ clock: () => now });
          try {
            for (const { advanceMs, counters, cost, giveBack } of steps) {
              now += advanceMs;
              const checkOf = (i: number, cost: number): CounterCheck => {
                const { algorithm, limit, extraBurst, reference, ...rest } = specs[i]!;
                return {
                  // One tenant per counter: the counters of a step fall on different slots.
                  key: `eq:{${run}-${i}}`,
                  algorithm,
                  limit,
                  burst: algorithm === 'token_bucket' && limit > 0 ? limit + extraBurst : limit,
                  cost,
                  ...rest,
                  ...(reference && algorithm === 'fixed_window'
                    ? { reference: { stop: false, held: false, cached: reference.cached } }
                    : {}),
                };
              };
              const checks = counters.map((i) => checkOf(i, cost));
              if (giveBack !== null) {
                // As the plan makes it: a counter of its own, of no other role.
                const { reference: _, ...given } = checkOf(giveBack.counter, giveBack.cost);
                checks.push({
                  ...given,
                  shadow: false,
                  quota: false,
                  overdraw: false,
                  giveBack: true,
                });
              }
              const onCluster = await store.decide(checks, now);
              const inMemory = await memory.decide(checks, now);
              // A refund settles after the charges of its own slot's call, and a denied request
              // gives those charges back a moment later (Store.ts): what it reports left, and when
              // that resets, then count its own request's charges. The counts match again after.
              const given = giveBack === null ? -1 : checks.length - 1;
              if (!inMemory.allowed && counters.includes(giveBack?.counter ?? -1)) {
                for (const decision of [onCluster, inMemory]) {
                  const result = decision.results[given];
                  if (result) Object.assign(result, { remaining: -1, resetMs: -1 });
                }
              }
              expect(onCluster).toEqual(inMemory);
            }
          } finally {
            await memory.close();
          }
        },
      ),
      { numRuns: 300 },
    );
  }, 60_000);
});

describe('exactness across instances', () => {
  const LIMIT = 100;
  const REQUESTS = 2_000;
  const RACE = raceRules(
    'race',
    LIMIT,
    '  - key: remote_address\n    rate_limit: {unit: hour, requests_per_unit: 100000}\n',
  );
  const instances: TollgateProcess[] = [];
  beforeAll(async () => {
    const env = { REDIS_TYPE: 'cluster', REDIS_URL: cluster.url, REDIS_TIMEOUT: '5s' };
    instances.push(
      ...(await Promise.all(Array.from({ length: 4 }, () => spawnTollgate(RACE, env)))),
    );
  }, 60_000);
  afterAll(async () => {
    const exits = await Promise.all(instances.map((instance) => instance.stop()));
    expect(exits).toEqual(instances.map(() => 0));
  });

  it.each(['fixed', 'sliding', 'bucket'])(
    `%s: four processes allow exactly ${LIMIT} of ${REQUESTS} concurrent requests`,
    async (key) => {
      // Every other request also carries a per-address counter on some other slot.
      const responses = await Promise.all(
        Array.from({ length: REQUESTS }, (_, i) =>
          callCheck(
            instances[i % instances.length]!.client,
            {
              domain: 'race',
              descriptors:
                i % 2 === 0
                  ? [d(key, 'hot')]
                  : [d(key, 'hot'), d('remote_address', `10.1.${i % 50}.1`)],
            },
            30_000,
          ),
        ),
      );
      const allowed = responses.filter((response) => response.overall_code === 'OK').length;
      expect(allowed).toBe(LIMIT);
    },
    60_000,
  );
});

/** README's least-privilege ACL user, with its additions for Redis Cluster, on every node. */
async function createAclUser(name: string, withAsking: boolean) {
  const rules =
    `SETUSER ${name} on >${name}-secret resetkeys ~tg:* resetchannels -@all ` +
    '+evalsha +eval +hmget +hset +hgetall +hdel +pexpire +time +ping +del +exists ' +
    '+cluster|slots +cluster|info' +
    (withAsking ? ' +asking' : '');
  for (const node of await cluster.nodes()) {
    await cluster.client(node.port).call('ACL', ...rules.split(' '));
  }
  return `${name}:${name}-secret`;
}

describe('compatibility mode on a cluster', () => {
  it("answers a key over its limit from the local cache, as the reference's does", async () => {
    const spawned = await spawnTollgate(
      `
domain: compat
descriptors:
  - key: user
    rate_limit: {unit: hour, requests_per_unit: 2}
`,
      {
        REDIS_TYPE: 'cluster',
        REDIS_URL: cluster.url,
        COMPAT_MODE: 'reference',
        LOCAL_CACHE_SIZE_IN_BYTES: '1000',
      },
    );
    try {
      const request = { domain: 'compat', descriptors: [d('user', `u-${Date.now()}`)] };
      const answers: string[] = [];
      for (let i = 0; i < 5; i++) answers.push(codes(await callCheck(spawned.client, request))[0]!);
      expect(answers).toEqual(['OK', 'OK', 'OVER_LIMIT', 'OVER_LIMIT', 'OVER_LIMIT']);
      // The third call learnt the key is over; the last two were answered from memory.
      const metrics = await (await fetch(`${spawned.httpUrl}/metrics`)).text();
      expect(metrics).toMatch(/^ratelimit_localcache_hitCount 2$/m);
      expect(metrics).toMatch(
        /^ratelimit_service_rate_limit_over_limit_with_local_cache\{[^}]*\} 2$/m,
      );
    } finally {
      await spawned.stop();
    }
  });
});

describe('faults under load', () => {
  const LIMIT = 300;
  const requestOf = (tenant: string) => ({
    domain: 'api',
    descriptors: [d('mover', tenant), d('mover', tenant, 'route', '/a')],
  });
  const slotOfTenant = (tenant: string) => slotOf([['mover', tenant]], 'fixed_window');
  // Every call goes to Redis: no denial is answered from the over-limit cache.
  const env = { REDIS_TIMEOUT: `${FAULT_TIMEOUT_MS}ms`, OVER_LIMIT_CACHE_SIZE: '0' };

  /** Keeps 8 calls in flight around `fault`, which starts once half the limit is used. */
  async function loadAround(
    tenant: string,
    fault: () => Promise<void>,
    check = (request: RateLimitRequestObject) => tollgate!.check(request),
  ) {
    let oks = 0;
    return underLoad(
      async () => {
        const answer = codes(await check(requestOf(tenant)))[0]!;
        if (answer === 'OK') oks += 1;
        return answer;
      },
      { concurrency: 8, tailMs: 1_000 },
      async () => {
        await waitFor(async () => oks >= LIMIT / 2);
        await fault();
      },
    );
  }

  /** Moves the slot of `tenant` to another master, its two counters 100 ms apart. */
  async function migration(tenant: string) {
    const slot = slotOfTenant(tenant);
    const { target, run } = await cluster.migration(slot);
    const moved = async () => {
      await resetStats();
      const keys = await run(100);
      // The tenant's two counters, and any other test's keys that happen to share the slot.
      expect(keys.filter((key) => key.includes(`:${tenant}}`))).toHaveLength(2);
    };
    return { slot, target, run: moved };
  }

  async function expectHealthy(label: string, tenant: string, calls: LoadCall[]) {
    console.log(loadSummary(label, calls));
    for (const answer of new Set(calls.map((call) => call.answer))) {
      expect(['OK', 'OVER_LIMIT', 'UNAVAILABLE']).toContain(answer);
    }
    // No call hangs: each answers within REDIS_TIMEOUT plus a margin.
    expect(Math.max(...calls.map((call) => call.ms))).toBeLessThan(FAULT_TIMEOUT_MS + MARGIN_MS);
    // Recovered by itself: the last calls were all decided.
    const last = calls
      .slice()
      .sort((a, b) => a.at - b.at)
      .slice(-20);
    expect(last.map((call) => call.answer)).not.toContain('UNAVAILABLE');
    // The counter is full, and it holds every allowed call: never more than the limit, and none
    // forgotten on the way (a call that failed may still have been counted).
    expect(codes(await tollgate!.check(requestOf(tenant)))[0]).toBe('OVER_LIMIT');
    const allowed = calls.filter((call) => call.answer === 'OK').length;
    const failed = calls.filter((call) => call.answer === 'UNAVAILABLE').length;
    expect(allowed).toBeLessThanOrEqual(LIMIT);
    expect(allowed).toBeGreaterThanOrEqual(LIMIT - failed);
  }

  it('migrating the slot of a live tenant answers every call in time and admits no more than the limit', async () => {
    // As README's least-privilege ACL user for Redis Cluster, which must be able to follow ASK.
    tollgate = await startOnCluster({ ...env, REDIS_AUTH: await createAclUser('mover', true) });
    const { slot, target, run } = await migration('moving');
    const { calls, window } = await loadAround('moving', run);
    await expectHealthy('slot migration', 'moving', calls);
    console.log(`slot migration: redirections answered by Redis ${await redirections()}`);
    // Errors, if any, only while the slot moved, and a moment after.
    for (const call of calls.filter((c) => c.answer === 'UNAVAILABLE')) {
      expect(call.at).toBeGreaterThanOrEqual(window[0]);
      expect(call.at).toBeLessThan(window[1] + 500);
    }
    expect((await cluster.masterOf(slot)).id).toBe(target.id);
    await cluster.settled();
  }, 60_000);

  it('migrating a slot as an ACL user without +asking fails calls, and never the process', async () => {
    // ioredis sends ASKING without reading its reply; refused, it must not stop the process.
    const user = await createAclUser('noasking', false);
    const spawned = await spawnTollgate(RULES, {
      ...env,
      REDIS_TYPE: 'cluster',
      REDIS_URL: cluster.url,
      REDIS_AUTH: user,
    });
    try {
      const { run } = await migration('no-asking');
      const { calls } = await loadAround('no-asking', run, (request) =>
        callCheck(spawned.client, request),
      );
      console.log(loadSummary('slot migration without +asking', calls));
      const answers = new Set(calls.map((call) => call.answer));
      expect([...answers].every((a) => ['OK', 'OVER_LIMIT', 'UNAVAILABLE'].includes(a))).toBe(true);
      expect(Math.max(...calls.map((call) => call.ms))).toBeLessThan(FAULT_TIMEOUT_MS + MARGIN_MS);
      expect(spawned.child.exitCode).toBeNull();
      expect(codes(await callCheck(spawned.client, requestOf('no-asking')))[0]).toMatch(
        /^(OK|OVER_LIMIT)$/,
      );
    } finally {
      expect(await spawned.stop(), spawned.stderr()).toBe(0);
    }
    await cluster.settled();
  }, 60_000);

  it('a coordinated CLUSTER FAILOVER of the tenant’s master recovers by itself, with no hung call', async () => {
    tollgate = await startOnCluster(env);
    const slot = slotOfTenant('failing-over');
    const failing = await cluster.masterOf(slot);
    const replica = (await cluster.nodes()).find((node) => node.masterId === failing.id)!;
    const { calls } = await loadAround('failing-over', async () => {
      await cluster.client(replica.port).call('CLUSTER', 'FAILOVER');
      await waitFor(async () => (await cluster.masterOf(slot)).id === replica.id, 15_000);
    });
    await expectHealthy('coordinated failover', 'failing-over', calls);
    await cluster.settled();
  }, 60_000);
});
