import { spawn } from 'node:child_process';
import { existsSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import type { Redis } from 'ioredis';
import { createProcessGroup } from './processGroup.js';
import { freePort } from './ports.js';
import { PortTaken, waitForPing } from './redis.js';
import { hasRedisServer, redisServer } from './redisServer.js';
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
  if (!hasRedisServer()) {
    throw new Error(
      `The sentinel tests need ${redisServer} (Debian: apt-get install -y redis-server)`,
    );
  }
  const { dir, children, client, stop } = createProcessGroup('tollgate-sentinel-');
  /**
   * Starts a redis-server on a port picked just before it, and returns the port once the server
   * answering there is this one (by its process id). Another suite running beside this one draws
   * its ports from the same blocks, and may take one between the pick and the bind: then ours
   * exits, and a client of that port reaches the other suite's process, or nothing, from then on.
   * It is started again on another port.
   */
  const launch = async (
    name: string,
    args: (port: number, logfile: string) => string[],
  ): Promise<number> => {
    for (let attempt = 1; ; attempt++) {
      const port = await freePort();
      const logfile = join(dir, `${name}-${port}.log`);
      const child = spawn(redisServer, args(port, logfile), { stdio: 'ignore' });
      children.push(child);
      try {
        await waitForPing(port, child);
        return port;
      } catch (error) {
        const log = existsSync(logfile) ? readFileSync(logfile, 'utf8') : '';
        const taken = error instanceof PortTaken || /Address already in use/.test(log);
        if (!taken || attempt >= 5) throw new Error(`${String(error)}\n${log}`);
      }
    }
  };
  const dataArgs = (port: number, logfile: string) => [
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
    logfile,
  ];

  let master: number;
  let replica: number;
  const sentinelPorts: number[] = [];
  try {
    master = await launch('redis', dataArgs);
    replica = await launch('redis', (port, logfile) => [
      ...dataArgs(port, logfile),
      '--replicaof',
      '127.0.0.1',
      String(master),
    ]);
    await waitFor(async () => {
      const info = await client(master).info('replication');
      return /connected_slaves:1/.test(info) && /state=online/.test(info);
    });
    for (let i = 0; i < 3; i++) {
      const sentinelPort = await launch('sentinel', (port, logfile) => {
        const conf = join(dir, `sentinel-${port}.conf`);
        writeFileSync(
          conf,
          [
            `port ${port}`,
            'bind 127.0.0.1',
            `dir ${dir}`,
            `logfile ${logfile}`,
            `sentinel monitor ${NAME} 127.0.0.1 ${master} 2`,
            `sentinel down-after-milliseconds ${NAME} 1000`,
            `sentinel failover-timeout ${NAME} 4000`,
            `sentinel parallel-syncs ${NAME} 1`,
            '',
          ].join('\n'),
        );
        return [conf, '--sentinel'];
      });
      sentinelPorts.push(sentinelPort);
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
