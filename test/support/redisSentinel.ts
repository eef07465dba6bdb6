import { spawn, spawnSync } from 'node:child_process';
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import type { Redis } from 'ioredis';
import { createProcessGroup } from './processGroup.js';
import { freePort } from './ports.js';
import { waitFor } from './redisCluster.js';

/**
 * A real Sentinel deployment for integration tests: a master, one replica and three sentinels
 * (`redis-server sentinel.conf --sentinel`, quorum 2), on free ports, with a short
 * down-after-milliseconds and failover-timeout so that a failover takes a second or two.
 */
export interface TestSentinel {
  /** The name the sentinels monitor the master under. */
  name: string;
  sentinelPorts: number[];
  /** REDIS_URL for REDIS_TYPE=sentinel, in the redis+sentinel:// form. */
  url: string;
  /** The reference's form of the same: `NAME,host:port,...`. */
  referenceUrl: string;
  /** A plain client of a data node or sentinel, for assertions (not the one under test). */
  client(port: number): Redis;
  /** The port of the master the sentinels name now. */
  masterPort(): Promise<number>;
  /** SENTINEL FAILOVER, then waits until every sentinel names the new master. */
  failover(): Promise<{ from: number; to: number }>;
  stop(): Promise<void>;
}

const NAME = 'm';

export async function startRedisSentinel(): Promise<TestSentinel> {
  if (spawnSync('redis-server', ['--version']).status !== 0) {
    throw new Error(
      'The sentinel tests need redis-server (Debian: apt-get install -y redis-server)',
    );
  }
  const { dir, children, client, stop } = createProcessGroup('tollgate-sentinel-');
  const launch = (args: string[]) => {
    children.push(spawn('redis-server', args, { stdio: 'ignore' }));
  };
  const dataArgs = (port: number) => [
    '--port',
    String(port),
    '--bind',
    '127.0.0.1',
    '--save',
    '',
    '--appendonly',
    'no',
    '--dir',
    dir,
    '--logfile',
    join(dir, `redis-${port}.log`),
  ];

  const master = await freePort();
  const replica = await freePort();
  const sentinelPorts = [await freePort(), await freePort(), await freePort()];
  try {
    launch(dataArgs(master));
    launch([...dataArgs(replica), '--replicaof', '127.0.0.1', String(master)]);
    await waitFor(async () => {
      const info = await client(master).info('replication');
      return /connected_slaves:1/.test(info) && /state=online/.test(info);
    });
    for (const port of sentinelPorts) {
      const conf = join(dir, `sentinel-${port}.conf`);
      writeFileSync(
        conf,
        [
          `port ${port}`,
          'bind 127.0.0.1',
          `dir ${dir}`,
          `logfile ${join(dir, `sentinel-${port}.log`)}`,
          `sentinel monitor ${NAME} 127.0.0.1 ${master} 2`,
          `sentinel down-after-milliseconds ${NAME} 1000`,
          `sentinel failover-timeout ${NAME} 4000`,
          `sentinel parallel-syncs ${NAME} 1`,
          '',
        ].join('\n'),
      );
      launch([conf, '--sentinel']);
    }
    // Ready for a failover: every sentinel knows the replica and the two other sentinels.
    await waitFor(async () => {
      for (const port of sentinelPorts) {
        const fields = pairs((await client(port).call('SENTINEL', 'MASTER', NAME)) as string[]);
        const replicas = (await client(port).call('SENTINEL', 'REPLICAS', NAME)) as string[][];
        if (fields['num-other-sentinels'] !== '2') return false;
        if (!replicas.some((entry) => /^slave$/.test(pairs(entry).flags ?? ''))) return false;
      }
      return true;
    }, 20_000);
  } catch (error) {
    await stop();
    throw error;
  }

  const masterPort = async () => {
    const [, port] = (await client(sentinelPorts[0]!).call(
      'SENTINEL',
      'GET-MASTER-ADDR-BY-NAME',
      NAME,
    )) as [string, string];
    return Number(port);
  };
  const hosts = sentinelPorts.map((port) => `127.0.0.1:${port}`).join(',');
  return {
    name: NAME,
    sentinelPorts,
    url: `redis+sentinel://${hosts}/${NAME}`,
    referenceUrl: `${NAME},${hosts}`,
    client,
    masterPort,
    async failover() {
      const from = await masterPort();
      const to = from === master ? replica : master;
      await client(sentinelPorts[0]!).call('SENTINEL', 'FAILOVER', NAME);
      await waitFor(async () => {
        for (const port of sentinelPorts) {
          const [, named] = (await client(port).call(
            'SENTINEL',
            'GET-MASTER-ADDR-BY-NAME',
            NAME,
          )) as [string, string];
          if (Number(named) !== to) return false;
        }
        const role = (await client(to).call('ROLE')) as [string];
        return role[0] === 'master';
      }, 20_000);
      return { from, to };
    },
    stop,
  };
}

/** A flat [key, value, key, value, ...] reply as an object. */
function pairs(flat: string[]): Record<string, string> {
  const object: Record<string, string> = {};
  for (let i = 0; i + 1 < flat.length; i += 2) object[flat[i]!] = flat[i + 1]!;
  return object;
}
