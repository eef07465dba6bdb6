import { Cluster, Redis } from 'ioredis';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {
  GIVEN_BACK_CHANNEL,
  subscribeToRefunds,
  type Coherence,
} from '../../src/store/invalidation.js';
import { startRedis, type TestRedis } from '../support/redis.js';
import { startRedisCluster, waitFor, type TestCluster } from '../support/redisCluster.js';

// The caches' subscription to other processes' refunds (src/store/invalidation.ts), on a plain
// Redis and on a Cluster. A cache may answer a denial from memory only while it hears every
// notice: a subscription that was cut, on whichever node it was, must stop the answering and
// empty the caches before it answers again, and it must come back by itself.

interface Heard {
  coherence: Coherence;
  /** What the caches were told to forget, in order: keys, and 'all'. */
  forgotten: string[];
  refused: string[];
  close(): Promise<void>;
}

function listen(connection: Redis | Cluster): Heard {
  const forgotten: string[] = [];
  const refused: string[] = [];
  const coherence = subscribeToRefunds({
    connection,
    onRefused: (reason) => refused.push(reason),
  });
  coherence.onNotice((key) => forgotten.push(key));
  return {
    coherence,
    forgotten,
    refused,
    close: async () => {
      await coherence.close();
      connection.disconnect();
    },
  };
}

/** Publishes `key` until the listener hears it: a notice sent while it is not subscribed is lost. */
async function heardAfter(heard: Heard, publisher: Redis, key: string): Promise<void> {
  await waitFor(async () => {
    await publisher.publish(GIVEN_BACK_CHANNEL, key);
    await new Promise((resolve) => setTimeout(resolve, 50));
    return heard.forgotten.includes(key);
  }, 20_000);
}

/** Cuts every subscriber connection on these nodes, as a node restart or a proxy's idle cut would. */
async function cutSubscribers(clients: Redis[]): Promise<number> {
  let cut = 0;
  for (const client of clients)
    cut += Number(await client.call('CLIENT', 'KILL', 'TYPE', 'pubsub'));
  return cut;
}

/**
 * Every cut is seen: from the cut until everything is forgotten again, the caches answer nothing,
 * and a notice sent after that is heard.
 */
async function survivesCut(heard: Heard, admins: Redis[], publisher: Redis): Promise<void> {
  await heard.coherence.firstLive(20_000);
  expect(heard.coherence.live()).toBe(true);
  await heardAfter(heard, publisher, 'before-cut');

  const before = heard.forgotten.length;
  expect(await cutSubscribers(admins)).toBeGreaterThan(0);
  // The cut is a gap in what was heard: whatever was sent meanwhile is lost, so the caches may
  // not answer again until they have forgotten everything.
  await waitFor(async () => heard.forgotten.slice(before).includes('all'), 20_000);
  expect(heard.coherence.live()).toBe(true);
  await heardAfter(heard, publisher, 'after-cut');
  expect(heard.refused).toEqual([]);
}

describe('refund notices on a plain Redis', () => {
  let redis: TestRedis;
  beforeAll(async () => {
    redis = await startRedis();
  });
  afterAll(async () => {
    await redis.stop();
  });

  it('stops the caches answering when its subscription is cut, and subscribes again', async () => {
    const heard = listen(new Redis({ host: redis.host, port: redis.port }));
    try {
      await survivesCut(heard, [redis.client], redis.client);
    } finally {
      await heard.close();
    }
  });
});

describe('refund notices on a Cluster', () => {
  let cluster: TestCluster;
  beforeAll(async () => {
    cluster = await startRedisCluster();
  });
  afterAll(async () => {
    await cluster.stop();
  });

  const open = () => new Cluster(cluster.ports.map((port) => ({ host: '127.0.0.1', port })));

  it('hears a refund published on any node', async () => {
    const heard = listen(open());
    try {
      await heard.coherence.firstLive(20_000);
      expect(heard.coherence.live()).toBe(true);
      // Classic pub/sub reaches every node over the cluster bus.
      for (const port of cluster.ports) await heardAfter(heard, cluster.client(port), `on-${port}`);
    } finally {
      await heard.close();
    }
  });

  it('stops the caches answering when its subscription is cut, and subscribes again', async () => {
    const heard = listen(open());
    const admins = cluster.ports.map((port) => cluster.client(port));
    try {
      await survivesCut(heard, admins, admins[0]!);
      // Twice: the second subscription is cut as the first was.
      await survivesCut(heard, admins, admins[1]!);
    } finally {
      await heard.close();
    }
  });
});
