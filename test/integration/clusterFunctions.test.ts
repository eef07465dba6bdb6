import { spawn } from 'node:child_process';
import { join } from 'node:path';
import type { Redis } from 'ioredis';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { decisionCode } from '../../src/store/library.js';
import { createRedisStore, type RedisStore } from '../../src/store/redisStore.js';
import { keySlot } from '../../src/store/slots.js';
import type { CounterCheck } from '../../src/store/Store.js';
import { createProcessGroup, type ProcessGroup } from '../support/processGroup.js';
import { freePort } from '../support/ports.js';
import {
  clusterStoreSettings,
  startRedisCluster,
  waitFor,
  type TestCluster,
} from '../support/redisCluster.js';
import { redisServer } from '../support/redisServer.js';

// The cluster store's function library on a real Redis Cluster: loaded on every primary at the
// first connection, loaded again on a primary that lost it, and loaded on a primary that joined
// later and took a slot, whose first call finds it missing. No check fails on the way, and the
// counts carry on.

let cluster: TestCluster;
let store: RedisStore;
const joined: ProcessGroup = createProcessGroup('tollgate-cluster-joined-');
const LIBRARY = decisionCode().library.name;

beforeAll(async () => {
  cluster = await startRedisCluster();
  store = createRedisStore(clusterStoreSettings(cluster), { functions: 'on' });
  await store.firstConnection();
}, 60_000);

afterAll(async () => {
  await store?.close();
  await joined.stop();
  await cluster?.stop();
});

function counter(tenant: string, limit: number): CounterCheck {
  return {
    key: `cf:{${tenant}}`,
    algorithm: 'sliding_window',
    windowMs: 3_600_000,
    limit,
    burst: limit,
    cost: 1,
    shadow: false,
    quota: false,
    overdraw: false,
  };
}

async function allowed(check: CounterCheck, times: number): Promise<boolean[]> {
  const answers: boolean[] = [];
  for (let i = 0; i < times; i++) answers.push((await store.decide([check], undefined)).allowed);
  return answers;
}

async function libraryNames(node: Redis): Promise<string[]> {
  const listed = (await node.call('FUNCTION', 'LIST')) as unknown[][];
  return listed.map((entry) => String(entry[1]));
}

async function failedFcalls(node: Redis): Promise<number> {
  const info = await node.info('commandstats');
  return Number(/^cmdstat_fcall:.*failed_calls=(\d+)/m.exec(info)?.[1] ?? 0);
}

async function masterPorts(): Promise<number[]> {
  const nodes = await cluster.nodes();
  return nodes.filter((n) => n.role === 'master' && n.slots.length > 0).map((n) => n.port);
}

describe('the function library on Redis Cluster', () => {
  it('is on every primary after the first connection', async () => {
    expect(store.codePath()).toEqual({ kind: 'functions', detail: LIBRARY });
    const primaries = await masterPorts();
    expect(primaries).toHaveLength(3);
    for (const port of primaries)
      expect(await libraryNames(cluster.client(port))).toEqual([LIBRARY]);
  });

  it('a primary that lost it gets it again from the next call to it', async () => {
    const check = counter('flushed', 5);
    expect(await allowed(check, 3)).toEqual([true, true, true]);
    const owner = cluster.client((await cluster.masterOf(keySlot(check.key))).port);
    await owner.call('FUNCTION', 'FLUSH');
    await owner.config('RESETSTAT');
    expect(await allowed(check, 3)).toEqual([true, true, false]);
    expect(await libraryNames(owner)).toEqual([LIBRARY]);
    // The first of those calls found it missing there.
    expect(await failedFcalls(owner)).toBe(1);
  });

  it('a primary that lost it is not kept waiting by another primary that is stalled', async () => {
    const check = counter('beside-a-stalled-one', 5);
    expect(await allowed(check, 1)).toEqual([true]);
    const owner = (await cluster.masterOf(keySlot(check.key))).port;
    const other = (await masterPorts()).find((port) => port !== owner)!;
    await cluster.client(owner).call('FUNCTION', 'FLUSH');
    // Stalled for a second (less than the cluster's node timeout, so no failover follows).
    const order: string[] = [];
    const stalled = cluster
      .client(other)
      .call('DEBUG', 'SLEEP', '1')
      .then(() => order.push('the stalled primary answered'));
    await new Promise((resolve) => setTimeout(resolve, 100));
    const decided = store.decide([check], undefined).then((decision) => {
      order.push('the check was decided');
      return decision.allowed;
    });
    expect(await decided).toBe(true);
    await stalled;
    expect(order).toEqual(['the check was decided', 'the stalled primary answered']);
    expect(await libraryNames(cluster.client(owner))).toEqual([LIBRARY]);
  });

  it('a primary that lost it gets it again from a call redirected to it while its slot moves (ASK)', async () => {
    const check = counter('asked', 5);
    expect(await allowed(check, 3)).toEqual([true, true, true]);
    const slot = keySlot(check.key);
    const source = await cluster.masterOf(slot);
    const target = (await cluster.nodes()).find(
      (node) => node.role === 'master' && node.slots.length > 0 && node.id !== source.id,
    )!;
    const admin = (port: number) => cluster.client(port);
    // Mid-move: the counter is on the target already, and the source answers ASK for it.
    await admin(target.port).call('CLUSTER', 'SETSLOT', slot, 'IMPORTING', source.id);
    await admin(source.port).call('CLUSTER', 'SETSLOT', slot, 'MIGRATING', target.id);
    await admin(source.port).call(
      ...['MIGRATE', '127.0.0.1', target.port, '', 0, 5_000, 'KEYS', check.key],
    );
    await admin(target.port).call('FUNCTION', 'FLUSH');
    try {
      const asked = Number(
        /^errorstat_ASK:count=(\d+)/m.exec(await admin(source.port).info('errorstats'))?.[1] ?? 0,
      );
      expect(await allowed(check, 3)).toEqual([true, true, false]);
      expect(await libraryNames(admin(target.port))).toEqual([LIBRARY]);
      const askedNow = Number(
        /^errorstat_ASK:count=(\d+)/m.exec(await admin(source.port).info('errorstats'))?.[1] ?? 0,
      );
      expect(askedNow).toBeGreaterThan(asked);
    } finally {
      for (const node of [target, source]) {
        await admin(node.port).call('CLUSTER', 'SETSLOT', slot, 'NODE', target.id);
      }
    }
    expect(await allowed(check, 1)).toEqual([false]);
  }, 60_000);

  it('a primary that joined later gets it from the first call to a slot moved to it', async () => {
    const check = counter('moved', 5);
    expect(await allowed(check, 3)).toEqual([true, true, true]);
    const port = await joinEmptyPrimary();
    const newcomer = joined.client(port);
    expect(await libraryNames(newcomer)).toEqual([]);
    await moveSlot(keySlot(check.key), port);

    expect(await allowed(check, 3)).toEqual([true, true, false]);
    expect(await libraryNames(newcomer)).toEqual([LIBRARY]);
    expect(await failedFcalls(newcomer)).toBe(1);
  }, 60_000);
});

/** Starts a redis-server in cluster mode and has the cluster meet it: a primary with no slot. */
async function joinEmptyPrimary(): Promise<number> {
  const port = await freePort();
  const busPort = await freePort();
  joined.children.push(
    spawn(
      redisServer,
      [
        ...['--port', String(port), '--cluster-port', String(busPort), '--bind', '127.0.0.1'],
        ...['--cluster-enabled', 'yes', '--cluster-node-timeout', '2000'],
        ...['--cluster-config-file', join(joined.dir, `nodes-${port}.conf`), '--dir', joined.dir],
        ...['--save', '', '--appendonly', 'no', '--logfile', join(joined.dir, 'redis.log')],
      ],
      { stdio: 'ignore' },
    ),
  );
  await waitFor(() =>
    joined
      .client(port)
      .ping()
      .then(() => true),
  );
  await cluster.client(cluster.ports[0]!).call('CLUSTER', 'MEET', '127.0.0.1', port, busPort);
  // Every node knows every other.
  await waitFor(async () => {
    const views = await Promise.all(
      [...cluster.ports, port].map(async (p) => {
        const client = p === port ? joined.client(p) : cluster.client(p);
        return String(await client.call('CLUSTER', 'NODES'))
          .trim()
          .split('\n').length;
      }),
    );
    if (!views.every((count) => count === cluster.ports.length + 1)) return false;
    // And it has learnt who serves each slot: it answers, and takes keys, only then.
    return /cluster_state:ok/.test(String(await joined.client(port).call('CLUSTER', 'INFO')));
  }, 20_000);
  return port;
}

/** Moves `slot` and its keys to the node on `port`, as `redis-cli --cluster reshard` would. */
async function moveSlot(slot: number, port: number): Promise<void> {
  const target = joined.client(port);
  const targetId = String(await target.call('CLUSTER', 'MYID'));
  const sourceNode = await cluster.masterOf(slot);
  const source = cluster.client(sourceNode.port);
  await target.call('CLUSTER', 'SETSLOT', slot, 'IMPORTING', sourceNode.id);
  await source.call('CLUSTER', 'SETSLOT', slot, 'MIGRATING', targetId);
  const keys = (await source.call('CLUSTER', 'GETKEYSINSLOT', slot, 1000)) as string[];
  for (const key of keys) {
    await source.call('MIGRATE', '127.0.0.1', port, '', 0, 5_000, 'KEYS', key);
  }
  await target.call('CLUSTER', 'SETSLOT', slot, 'NODE', targetId);
  await source.call('CLUSTER', 'SETSLOT', slot, 'NODE', targetId);
  await waitFor(async () => (await cluster.masterOf(slot)).port === port, 20_000);
  await cluster.settled();
}
