import { readFileSync, readdirSync, readlinkSync, writeFileSync } from 'node:fs';
import http from 'node:http';
import { setTimeout as delay } from 'node:timers/promises';
import { createServer, type Server } from 'node:net';
import * as grpc from '@grpc/grpc-js';
import { Redis } from 'ioredis';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createRateLimitClient, type RateLimitClient } from '@tollgate/client';
import {
  refusal,
  runToExit as runProcessToExit,
  spawnTollgate,
  type TollgateProcess,
} from '../support/processes.js';
import { freePort } from '../support/ports.js';
import { startRedis, type TestRedis } from '../support/redis.js';
import {
  firstAssignment,
  openRlqs,
  usageReport,
  type RlqsTestStream,
} from '../support/rlqsClient.js';
import { callCheck, d, eventually, writeRules } from '../support/tollgate.js';
import { raceRules } from '../support/raceRules.js';

// WORKERS=2: the built entry point as a cluster primary with two workers on one Redis. Clients
// connect one after another, so node:cluster hands their connections to the workers in turn;
// /proc shows which worker holds which of them, so the tests know that both workers took calls.

const LIMIT = 50;
const RULES = raceRules(
  'workers',
  LIMIT,
  '  - key: counted\n    rate_limit: {unit: hour, requests_per_unit: 100000}\n',
);

let redis: TestRedis;
/** Every tollgate started here: one that a failed test left running is killed at the end. */
const started: TollgateProcess[] = [];
beforeAll(async () => {
  redis = await startRedis();
});
afterAll(async () => {
  // Its workers exit with it: node:cluster ends a worker whose primary has gone.
  for (const { child } of started) if (child.exitCode === null) child.kill('SIGKILL');
  await redis?.stop();
});

interface LogLine {
  msg?: string;
  worker?: number;
  pid?: number;
}

const logs = (tollgate: TollgateProcess): LogLine[] =>
  tollgate
    .stdout()
    .split('\n')
    .filter((line) => line.startsWith('{'))
    .map((line) => JSON.parse(line) as LogLine);

/** The pids of the workers the primary has reported ready, in order. */
const readyPids = (tollgate: TollgateProcess): number[] =>
  logs(tollgate).flatMap((line) => (line.msg === 'worker ready' && line.pid ? [line.pid] : []));

async function startWorkers(env: Record<string, string> = {}): Promise<TollgateProcess> {
  const tollgate = await spawnTollgate(
    RULES,
    { WORKERS: '2', REDIS_URL: redis.url, REDIS_TIMEOUT: '5s', LOG_LEVEL: 'info', ...env },
    { captureStdout: true },
  );
  started.push(tollgate);
  await eventually(
    async () => logs(tollgate).some((line) => line.msg === 'workers ready'),
    30_000,
  ).catch(() => {
    throw new Error(`the workers did not start: ${tollgate.stdout()} ${tollgate.stderr()}`);
  });
  return tollgate;
}

/**
 * `count` clients, each on a connection of its own; with `reach`, more (up to 8) until each of
 * those workers holds one. The primary hands connections out in turn, but this process's
 * background connections (below) may take some turns, so that `count` alone might all land on
 * one worker.
 */
async function connect(address: string, count: number, reach?: { pids: number[]; port: number }) {
  const clients: RateLimitClient[] = [];
  const ports = new Set<number>();
  const reached = () =>
    reach === undefined || connectionsHeld(reach.pids, reach.port, ports).every((n) => n >= 1);
  for (let i = 0; i < count || (!reached() && i < count + 8); i++) {
    const client = createRateLimitClient(address, undefined, {
      'grpc.use_local_subchannel_pool': 1,
    });
    await new Promise<void>((resolve, reject) =>
      client.waitForReady(Date.now() + 15_000, (error) => (error ? reject(error) : resolve())),
    );
    clients.push(client);
    for (const port of await localPorts(client)) ports.add(port);
  }
  return { clients, ports };
}

/**
 * A client's connections, by local port, from grpc-js's channelz. Other connections of this
 * process cannot be mistaken for them (grpc-js retries the health probes' refused connections
 * in the background, long after the probe).
 */
async function localPorts(client: {
  getChannel(): { getChannelzRef(): { id: number } };
}): Promise<number[]> {
  type Ref = { subchannel_id?: string; socket_id?: string };
  const ask = <Reply>(handler: unknown, request: object) =>
    new Promise<Reply>((resolve, reject) =>
      (handler as (call: object, done: (error: Error | null, reply: Reply) => void) => void)(
        { request },
        (error, reply) => (error ? reject(error) : resolve(reply)),
      ),
    );
  const handlers = grpc.getChannelzHandlers();
  const { channel } = await ask<{ channel: { subchannel_ref: Ref[] } }>(handlers.GetChannel, {
    channel_id: client.getChannel().getChannelzRef().id,
  });
  const ports: number[] = [];
  for (const { subchannel_id } of channel.subchannel_ref) {
    const { subchannel } = await ask<{ subchannel: { socket_ref: Ref[] } }>(
      handlers.GetSubchannel,
      { subchannel_id },
    );
    for (const { socket_id } of subchannel.socket_ref) {
      const { socket } = await ask<{ socket: { local: { tcpip_address: { port: number } } } }>(
        handlers.GetSocket,
        { socket_id },
      );
      ports.push(socket.local.tcpip_address.port);
    }
  }
  return ports;
}

/** `count` checks of one descriptor, dealt over the clients in turn, all at once. */
function spread(clients: RateLimitClient[], count: number, key: string, value: string) {
  return Promise.all(
    Array.from({ length: count }, (_, i) =>
      callCheck(
        clients[i % clients.length]!,
        { domain: 'workers', descriptors: [d(key, value)] },
        30_000,
      ),
    ),
  );
}

// Linux's view of the connections: which process holds which socket.

interface Connection {
  inode: string;
  localPort: number;
  remotePort: number;
}

/** Established TCP connections over IPv4 loopback, from /proc/net/tcp. */
function established(): Connection[] {
  return readFileSync('/proc/net/tcp', 'utf8')
    .split('\n')
    .slice(1)
    .flatMap((line) => {
      // sl local_address rem_address st ... inode; addresses are HEXIP:HEXPORT; 01 is ESTABLISHED.
      const field = line.trim().split(/\s+/);
      const port = (address?: string) => parseInt(address?.split(':')[1] ?? '', 16);
      if (field[3] !== '01' || !field[9]) return [];
      return [{ inode: field[9], localPort: port(field[1]), remotePort: port(field[2]) }];
    });
}

function socketsOf(pid: number): Set<string> {
  const inodes = new Set<string>();
  for (const fd of readdirSync(`/proc/${pid}/fd`)) {
    try {
      const inode = /^socket:\[(\d+)\]$/.exec(readlinkSync(`/proc/${pid}/fd/${fd}`))?.[1];
      if (inode) inodes.add(inode);
    } catch {
      // closed meanwhile
    }
  }
  return inodes;
}

/** How many of the connections from `clientPorts` to `port` each process holds. */
function connectionsHeld(pids: number[], port: number, clientPorts: Set<number>): number[] {
  const ours = established().filter((c) => c.localPort === port && clientPorts.has(c.remotePort));
  return pids.map((pid) => {
    const sockets = socketsOf(pid);
    return ours.filter((c) => sockets.has(c.inode)).length;
  });
}

const grpcPort = (tollgate: TollgateProcess) => Number(tollgate.address.split(':')[1]);

/** GET on a new connection each time, so that successive scrapes go to either worker. */
/** The value of an unlabelled series in an exposition; undefined when it is absent. */
function sample(exposition: string, name: string): number | undefined {
  const line = new RegExp(`^${name} (\\S+)$`, 'm').exec(exposition);
  return line ? Number(line[1]) : undefined;
}

function scrape(url: string): Promise<string> {
  return new Promise((resolve, reject) => {
    http
      .get(`${url}/metrics`, { agent: false }, (response) => {
        let body = '';
        response.setEncoding('utf8');
        response.on('data', (chunk: string) => (body += chunk));
        response.on('end', () =>
          response.statusCode === 200
            ? resolve(body)
            : reject(new Error(`${response.statusCode}: ${body}`)),
        );
      })
      .on('error', reject);
  });
}

const totalHits = (exposition: string, key: string): number | undefined => {
  const series = `ratelimit_service_rate_limit_total_hits{domain="workers",key1="${key}",key2=""} `;
  const line = exposition.split('\n').find((l) => l.startsWith(series));
  return line === undefined ? undefined : Number(line.slice(series.length));
};

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

describe('WORKERS=2 on one Redis', () => {
  let tollgate: TollgateProcess;
  let clients: RateLimitClient[] = [];
  let ports: Set<number>;
  beforeAll(async () => {
    tollgate = await startWorkers();
    ({ clients, ports } = await connect(tollgate.address, 6));
  }, 60_000);
  afterAll(async () => {
    for (const client of clients) client.close();
    expect(await tollgate?.stop()).toBe(0);
  }, 30_000);

  it('spreads connections over both workers', () => {
    const held = connectionsHeld(readyPids(tollgate), grpcPort(tollgate), ports);
    expect(held).toHaveLength(2);
    expect(held.every((n) => n >= 1)).toBe(true);
    expect(held[0]! + held[1]!).toBe(6);
  });

  it.each(['fixed', 'sliding', 'bucket'])(
    '%s: allows exactly the limit of 600 concurrent requests',
    async (key) => {
      const responses = await spread(clients, 600, key, 'hot');
      const allowed = responses.filter((response) => response.overall_code === 'OK').length;
      const denied = responses.filter((r) => r.overall_code === 'OVER_LIMIT').length;
      expect({ allowed, denied }).toEqual({ allowed: LIMIT, denied: 600 - LIMIT });
    },
    60_000,
  );

  it("a refund on one worker frees a counter that the other worker's cache remembers denied", async () => {
    const request = (hits: number, refund = false) => ({
      domain: 'workers',
      descriptors: [
        {
          ...d('fixed', 'refunded'),
          hits_addend: { value: String(hits) },
          ...(refund ? { is_negative_hits: true } : {}),
        },
      ],
    });
    const codesOf = (responses: { overall_code?: string }[]) =>
      responses.map((response) => response.overall_code);
    expect(codesOf([await callCheck(clients[0]!, request(LIMIT))])).toEqual(['OK']);
    // Denied on every connection, twice: both workers' caches remember the counter.
    const denied = await Promise.all(
      Array.from({ length: 2 * clients.length }, (_, i) =>
        callCheck(clients[i % clients.length]!, request(1)),
      ),
    );
    expect(new Set(codesOf(denied))).toEqual(new Set(['OVER_LIMIT']));

    const refund = await callCheck(clients[0]!, request(10, true));
    expect(refund.statuses?.[0]).toMatchObject({ code: 'OK', limit_remaining: 10 });
    // Once the notice has reached both workers, no connection is denied from memory.
    await eventually(async () => {
      const peeks = await Promise.all(clients.map((client) => callCheck(client, request(0))));
      return peeks.every((peek) => peek.overall_code === 'OK');
    });
    const charges = await spread(clients, 30, 'fixed', 'refunded');
    expect(codesOf(charges).filter((code) => code === 'OK')).toHaveLength(10);
  });

  it('/metrics sums both workers, whichever answers', async () => {
    // 20 calls on each of 6 connections: a worker holding k of them served 20k, fewer than 120.
    const responses = await spread(clients, 120, 'counted', 'x');
    expect(responses.every((response) => response.overall_code === 'OK')).toBe(true);
    const served = connectionsHeld(readyPids(tollgate), grpcPort(tollgate), ports).map(
      (held) => held * 20,
    );
    expect(served.every((n) => n > 0 && n < 120)).toBe(true);

    // Scrapes on new connections go to either worker in turn; each sees the whole sum.
    const sums = [];
    for (let i = 0; i < 4; i++) sums.push(totalHits(await scrape(tollgate.httpUrl), 'counted'));
    expect(sums).toEqual([120, 120, 120, 120]);
    // One exposition, not one per worker.
    const exposition = await scrape(tollgate.httpUrl);
    expect(exposition.match(/^# HELP ratelimit_service_rate_limit_total_hits /gm)).toHaveLength(1);
  });

  it('shares an RLQS rule over streams on both workers, through demand in Redis', async () => {
    // Four streams, each on a connection of its own, until both workers hold some.
    const streams: RlqsTestStream[] = [];
    const streamPorts = new Set<number>();
    const pids = readyPids(tollgate);
    try {
      while (
        streams.length < 4 ||
        (connectionsHeld(pids, grpcPort(tollgate), streamPorts).some((n) => n === 0) &&
          streams.length < 12)
      ) {
        const stream = openRlqs(tollgate.address, { 'grpc.use_local_subchannel_pool': 1 });
        streams.push(stream);
        stream.stream.write(usageReport({ counted: 'rlqs' }, 0, 'workers', 10));
        await stream.next();
        for (const port of await localPorts({ getChannel: () => stream.channel })) {
          streamPorts.add(port);
        }
      }
      const held = connectionsHeld(pids, grpcPort(tollgate), streamPorts);
      expect(held.every((n) => n >= 1)).toBe(true);
      // Once every stream's demand is measured (its second report), each gets its part of the
      // rule's 100,000 an hour (27.8 a second): about a quarter with four streams, whichever
      // worker holds it, taken at the second report that asks for it. Demand kept per worker
      // would give the streams of a worker that holds two of them half each.
      let rates: number[] = [];
      for (let round = 0; round < 3; round++) {
        // Reports a reporting interval apart (Envoy's is at least 100 ms): one that covers a few
        // milliseconds only moves a rate down (src/rlqs/assign.ts, `settle`).
        await delay(150);
        rates = [];
        for (const stream of streams) {
          stream.stream.write(usageReport({ counted: 'rlqs' }, 0, undefined, 10));
          rates.push(firstAssignment(await stream.next()).rate);
        }
      }
      const fair = 100_000 / 3600 / streams.length;
      for (const rate of rates) expect(rate).toBeLessThanOrEqual(fair * 1.1);
      expect(rates.reduce((sum, rate) => sum + rate, 0)).toBeGreaterThan((0.8 * 100_000) / 3600);
    } finally {
      for (const stream of streams) stream.close();
    }
  });
});

describe('SIGTERM to the primary during load', () => {
  it('drains the calls in flight on both workers, then exits 0', async () => {
    const tollgate = await startWorkers({ SHUTDOWN_GRACE: '10s' });
    const pids = readyPids(tollgate);
    const { clients, ports } = await connect(tollgate.address, 4, {
      pids,
      port: grpcPort(tollgate),
    });
    // Warm every connection and the script cache, so the calls below only wait on the stall.
    await spread(clients, 8, 'counted', 'warm');
    const held = connectionsHeld(pids, grpcPort(tollgate), ports);
    expect(held.every((n) => n >= 1) && held[0]! + held[1]! === clients.length).toBe(true);

    const staller = new Redis({ host: redis.host, port: redis.port });
    const stall = staller.call('DEBUG', 'SLEEP', '1');
    await sleep(50);
    const calls = spread(clients, 40, 'counted', 'drain');
    await sleep(200); // the calls reach the workers
    const exit = new Promise<number | null>((resolve) => tollgate.child.once('exit', resolve));
    tollgate.child.kill('SIGTERM');

    const answers = await calls;
    await stall;
    staller.disconnect();
    expect(answers.map((answer) => answer.overall_code)).toEqual(answers.map(() => 'OK'));
    expect(await exit).toBe(0);
    const drained = logs(tollgate).filter((line) => line.msg === 'draining' && line.worker);
    expect(drained.map((line) => line.worker).sort()).toEqual([1, 2]);
    for (const client of clients) client.close();
  }, 60_000);
});

describe('SIGHUP to the primary', () => {
  it('reloads the rules in every worker', async () => {
    const rulesPath = writeRules(RULES);
    // Changes wait an hour to settle: only the signal can load them now.
    const tollgate = await startWorkers({ CONFIG_PATH: rulesPath, CONFIG_SETTLE_TIME: '1h' });
    const pids = readyPids(tollgate);
    const { clients } = await connect(tollgate.address, 2, { pids, port: grpcPort(tollgate) });
    writeFileSync(rulesPath, RULES.replace('requests_per_unit: 100000', 'requests_per_unit: 777'));
    tollgate.child.kill('SIGHUP');
    await eventually(async () => {
      const answers = await spread(clients, 8, 'counted', 'hup');
      return answers.every((a) => a.statuses?.[0]?.current_limit?.requests_per_unit === 777);
    }, 10_000);
    const reloaded = logs(tollgate).filter((line) => line.msg === 'rules reloaded' && line.worker);
    expect(new Set(reloaded.map((line) => line.worker)).size).toBe(2);
    expect(tollgate.child.exitCode).toBeNull();
    for (const client of clients) client.close();
  }, 60_000);

  it('reaches a worker that is still starting once it is ready, instead of ending it', async () => {
    const tollgate = await startWorkers();
    const [victim] = readyPids(tollgate) as [number];
    process.kill(victim, 'SIGKILL');
    await eventually(
      async () =>
        logs(tollgate).some((l) => l.msg === 'worker exited; replacing it' && l.pid === victim),
      15_000,
    );
    // Hang-ups all through the replacement's start, before its handler exists and after.
    const hangups = setInterval(() => tollgate.child.kill('SIGHUP'), 20);
    try {
      await eventually(async () => readyPids(tollgate).length === 3, 30_000);
    } finally {
      clearInterval(hangups);
    }
    const replacement = logs(tollgate).find(
      (line) => line.msg === 'worker ready' && line.pid === readyPids(tollgate)[2],
    )?.worker;
    await eventually(
      async () =>
        logs(tollgate).some((l) => l.msg === 'reloading the rules' && l.worker === replacement),
      10_000,
    );
    expect(logs(tollgate).filter((l) => l.msg === 'worker exited; replacing it')).toHaveLength(1);
    expect(tollgate.child.exitCode).toBeNull();
  }, 60_000);
});

describe('a worker killed with SIGKILL', () => {
  it('is replaced, the service keeps answering, and no count is lost', async () => {
    const tollgate = await startWorkers();
    const port = grpcPort(tollgate);
    const [victim, survivor] = readyPids(tollgate) as [number, number];
    const first = await connect(tollgate.address, 4, { pids: [victim, survivor], port });
    expect(connectionsHeld([victim], port, first.ports)[0]).toBeGreaterThanOrEqual(1);
    const ok = (responses: { overall_code?: string }[]) =>
      responses.every((response) => response.overall_code === 'OK');
    expect(ok(await spread(first.clients, 40, 'counted', 'k'))).toBe(true);
    // Scraped before the kill: the dead worker's counts stay in the sum afterwards.
    const before = await scrape(tollgate.httpUrl);
    expect(totalHits(before, 'counted')).toBe(40);
    expect(sample(before, 'tollgate_workers')).toBe(2);
    expect(sample(before, 'tollgate_worker_restarts_total')).toBe(0);

    process.kill(victim, 'SIGKILL');
    await eventually(
      async () =>
        logs(tollgate).some((l) => l.msg === 'worker exited; replacing it' && l.pid === victim),
      15_000,
    );
    // The survivor answers at once: on the old clients, which reconnect, and on new ones.
    const meanwhile = await connect(tollgate.address, 2);
    expect(ok(await spread([...first.clients, ...meanwhile.clients], 30, 'counted', 'k'))).toBe(
      true,
    );

    await eventually(async () => readyPids(tollgate).length === 3, 30_000);
    const replacement = readyPids(tollgate)[2]!;
    expect([victim, survivor]).not.toContain(replacement);
    // The replacement takes its turn at new connections, and serves them.
    const last = await connect(tollgate.address, 4, { pids: [replacement], port });
    expect(connectionsHeld([replacement], port, last.ports)[0]).toBeGreaterThanOrEqual(1);
    expect(ok(await spread(last.clients, 20, 'counted', 'k'))).toBe(true);

    for (let i = 0; i < 3; i++) {
      const after = await scrape(tollgate.httpUrl);
      expect(totalHits(after, 'counted')).toBe(40 + 30 + 20);
      expect(sample(after, 'tollgate_workers')).toBe(2);
      expect(sample(after, 'tollgate_worker_restarts_total')).toBe(1);
    }
    for (const client of [...first.clients, ...meanwhile.clients, ...last.clients]) client.close();
    expect(await tollgate.stop()).toBe(0);
  }, 90_000);
});

describe('a start-up error with WORKERS=2', () => {
  const runToExit = (env: Record<string, string>) =>
    runProcessToExit(RULES, { WORKERS: '2', REDIS_URL: redis.url, LOG_LEVEL: 'info', ...env });

  it('is a bad setting, reported once by the primary', async () => {
    const { code, stdout, stderr } = await runToExit({ REDIS_URL: '' });
    expect(code).toBe(1);
    expect(refusal(stderr)).toBe(
      'WORKERS: more than 1 needs REDIS_URL, since workers share no memory',
    );
    expect(stdout).toBe('');
  });

  it('is bad rules, reported once, before any worker starts', async () => {
    const bad =
      'domain: w\ndescriptors:\n  - key: k\n    rate_limit: {unit: fortnight, requests_per_unit: 1}\n';
    const { code, stdout, stderr } = await runToExit({ CONFIG_PATH: writeRules(bad) });
    expect(code).toBe(1);
    expect(refusal(stderr)).toMatch(/^.*rules\.yaml: .*'fortnight'[^\n]*$/);
    expect(stdout).toBe('');
  });

  it('in the workers (a port in use) ends the primary once, with no respawn loop', async () => {
    const port = await freePort();
    const squatter: Server = createServer();
    await new Promise<void>((resolve) => squatter.listen(port, '127.0.0.1', resolve));
    try {
      const { code, stdout, stderr } = await runToExit({ PORT: String(port) });
      expect(code).toBe(1);
      // As for any bad setting: one fatal line, naming the setting and the port, and no stack.
      expect(refusal(stderr)).toBe(`PORT: 127.0.0.1:${port} is already in use by another process`);
      expect(stdout).not.toContain('replacing it');
    } finally {
      squatter.close();
    }
  }, 60_000);
});
