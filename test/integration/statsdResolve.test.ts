import { execFileSync } from 'node:child_process';
import { createSocket } from 'node:dgram';
import { constants, mkdtempSync, open, openSync, closeSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { createRateLimitClient } from '@tollgate/client';
import { afterEach, describe, expect, it } from 'vitest';
import { createService, type Service } from '../../src/process/service.js';
import { readSettings } from '../../src/process/settings.js';
import type { Lookup } from '../../src/observability/statsdAddress.js';
import {
  createTcpTransport,
  createUdpTransport,
  type StatsdTransport,
} from '../../src/observability/statsdTransport.js';
import { spawnTollgate, type TollgateProcess } from '../support/processes.js';
import { startRedis, type TestRedis } from '../support/redis.js';
import { callCheck, d, eventually, writeRules } from '../support/tollgate.js';

// STATSD_HOST is looked up once, not for every packet, and what cannot be sent is counted.
// A name that does not resolve (R17) loses every packet: the dropped counter says so, and one
// warning line, not one per packet. A name whose DNS hangs (R10) used to take a lookup per
// packet, each holding one of libuv's four threadpool lanes: then Redis, reconnecting to a host
// name, waited behind them and every check failed. Here the hanging lookup is a real one of
// those lanes held: it opens a FIFO that nobody writes, as getaddrinfo waits on a silent server.

const RULES = `
domain: web
descriptors:
  - key: user
    rate_limit: { unit: minute, requests_per_unit: 1000000 }
`;

let tollgate: TollgateProcess | undefined;
let service: Service | undefined;
let redis: TestRedis | undefined;
let transport: StatsdTransport | undefined;
const releases: (() => void)[] = [];
afterEach(async () => {
  await tollgate?.stop();
  await service?.stop(1_000);
  await transport?.close();
  await redis?.kill();
  await redis?.stop();
  for (const release of releases.splice(0)) release();
  tollgate = service = redis = transport = undefined;
});

async function droppedFlushes(httpUrl: string): Promise<number> {
  const text = await (await fetch(`${httpUrl}/metrics`)).text();
  return Number(/^tollgate_statsd_dropped_flushes_total (\d+)/m.exec(text)?.[1] ?? NaN);
}

/**
 * A lookup that never answers while it holds a threadpool lane, as getaddrinfo does when DNS
 * hangs; `started` counts the lookups begun.
 */
function hangingLookup(): { lookup: Lookup; started: () => number } {
  const fifo = join(mkdtempSync(join(tmpdir(), 'tollgate-dns-')), 'silent');
  execFileSync('mkfifo', [fifo]);
  let started = 0;
  releases.push(() => {
    // A writer lets every blocked open finish; with none blocked, there is nothing to release.
    try {
      closeSync(openSync(fifo, constants.O_WRONLY | constants.O_NONBLOCK));
    } catch {
      // ENXIO: no reader waits.
    }
  });
  const lookup: Lookup = (_host, _options, callback) => {
    started += 1;
    open(fifo, 'r', (error, fd) => {
      if (error === null) closeSync(fd);
      callback(new Error('getaddrinfo EAI_AGAIN statsd.example'), '', 0);
    });
  };
  return { lookup, started: () => started };
}

describe('statsd to a name that does not resolve (R17)', () => {
  it('counts the lost flushes, and says so in one line', async () => {
    tollgate = await spawnTollgate(
      RULES,
      {
        USE_STATSD: 'true',
        STATSD_PROTOCOL: 'udp',
        STATSD_HOST: 'nonexistent.invalid',
        STATS_FLUSH_INTERVAL: '100ms',
      },
      { captureStdout: true },
    );
    const running = tollgate;
    for (let i = 0; i < 30; i++) {
      await callCheck(running.client, { domain: 'web', descriptors: [d('user', `u${i}`)] });
      await sleep(50);
    }
    await eventually(async () => (await droppedFlushes(running.httpUrl)) >= 5, 5_000);
    const statsdLines = running
      .stdout()
      .split('\n')
      .filter((line) => line.includes('statsd'));
    expect(statsdLines).toHaveLength(1);
    expect(JSON.parse(statsdLines[0] as string)).toMatchObject({
      level: 40,
      err: { code: 'ENOTFOUND' },
    });
  });
});

describe('statsd to a name whose DNS hangs (R10)', () => {
  it.each([
    ['udp', createUdpTransport],
    ['tcp', createTcpTransport],
  ] as const)('%s: one lookup in flight, however many packets', async (_protocol, create) => {
    const dns = hangingLookup();
    transport = create({ host: 'statsd.example', port: 8125, onError: () => {}, ...dns });
    let taken = 0;
    for (let i = 0; i < 2_000; i++) {
      if (transport.send(`tollgate.test:${i}|c`)) taken++;
      if (i % 100 === 0) await sleep(10);
    }
    expect(taken).toBe(0);
    expect(dns.started()).toBe(1);
  });

  it('looks the name up again after a failure, and sends once it resolves', async () => {
    const server = createSocket('udp4');
    const lines: string[] = [];
    server.on('message', (message) => lines.push(message.toString('utf8')));
    await new Promise<void>((resolve) => server.bind(0, '127.0.0.1', () => resolve()));
    releases.push(() => server.close());
    let lookups = 0;
    const lookup: Lookup = (_host, _options, callback) => {
      lookups += 1;
      if (lookups === 1) callback(new Error('getaddrinfo EAI_AGAIN statsd.example'), '', 0);
      else callback(null, '127.0.0.1', 4);
    };
    const errors: Error[] = [];
    transport = createUdpTransport({
      host: 'statsd.example',
      port: server.address().port,
      onError: (error) => errors.push(error),
      lookup,
    });
    const udp = transport;
    await eventually(async () => udp.send('tollgate.test:1|c') && lines.length > 0, 5_000);
    expect(lookups).toBe(2);
    expect(errors.map((error) => error.message)).toEqual(['getaddrinfo EAI_AGAIN statsd.example']);
  });

  it('checks recover after Redis drops the connection, while statsd sends', async () => {
    redis = await startRedis();
    const dns = hangingLookup();
    const settings = readSettings({
      CONFIG_PATH: writeRules(RULES),
      GRPC_HOST: '127.0.0.1',
      GRPC_PORT: '0',
      HOST: '127.0.0.1',
      PORT: '0',
      LOG_LEVEL: 'silent',
      // A host name: reconnecting takes a lookup of its own, in the same threadpool.
      REDIS_URL: `redis://localhost:${redis.port}`,
      REDIS_TIMEOUT: '1s',
      USE_STATSD: 'true',
      STATSD_PROTOCOL: 'udp',
      STATSD_HOST: 'statsd.example',
      STATS_FLUSH_INTERVAL: '20ms',
    });
    service = createService({ settings, env: {}, statsdLookup: dns.lookup });
    const { grpcPort, httpPort } = await service.start();
    const client = createRateLimitClient(`127.0.0.1:${grpcPort}`);
    const check = (i: number) =>
      callCheck(client, { domain: 'web', descriptors: [d('user', `u${i}`)] }, 2_000);
    try {
      // A second of flushes, each with stats to send: per packet, the four lanes would fill.
      for (let i = 0; i < 50; i++) {
        expect((await check(i)).overall_code).toBe('OK');
        await sleep(20);
      }
      await redis.client.call('CLIENT', 'KILL', 'TYPE', 'normal', 'SKIPME', 'yes');
      let n = 100;
      await eventually(async () => (await check(n++)).overall_code === 'OK', 10_000);
      expect(dns.started()).toBe(1);
      expect(await droppedFlushes(`http://127.0.0.1:${httpPort}`)).toBeGreaterThan(0);
    } finally {
      client.close();
    }
  });
});
