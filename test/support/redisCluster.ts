import { spawn, spawnSync } from 'node:child_process';
import type { RedisSettings } from '../../src/process/settings.js';
import { join } from 'node:path';
import type { Redis } from 'ioredis';
import { createProcessGroup } from './processGroup.js';
import { freePort } from './ports.js';
import { hasRedisServer, redisServer } from './redisServer.js';

/**
 * A real Redis Cluster for integration tests: three masters and three replicas, six
 * `redis-server` processes on free ports (each with its own bus port), joined by
 * `redis-cli --cluster create`. The tests move slots and fail masters over; `nodes()` reads the
 * topology as it is now.
 */
export interface TestCluster {
  /** REDIS_URL for REDIS_TYPE=cluster: every node, comma-separated. */
  url: string;
  ports: number[];
  /** A plain client of one node, for assertions and admin commands (not the one under test). */
  client(port: number): Redis;
  /** The topology now, as CLUSTER NODES on a master says it. */
  nodes(): Promise<ClusterNode[]>;
  /** The master that serves `slot` now. */
  masterOf(slot: number): Promise<ClusterNode>;
  /** Waits until every node says cluster_state:ok and agrees on who serves each slot. */
  settled(timeoutMs?: number): Promise<void>;
  /** A move of `slot` to another master, chosen now and made when `run` is called. */
  migration(slot: number): Promise<SlotMigration>;
  stop(): Promise<void>;
}

export interface SlotMigration {
  source: ClusterNode;
  target: ClusterNode;
  /**
   * Moves the slot as `redis-cli --cluster reshard` would: IMPORTING, MIGRATING, each key on its
   * own with `gapMs` between them (so that for a while the slot's keys are split between the
   * nodes), then the new owner. Resolves with the keys it moved.
   */
  run(gapMs: number): Promise<string[]>;
}

export interface ClusterNode {
  id: string;
  port: number;
  role: 'master' | 'replica';
  /** For a replica, the id of its master. */
  masterId: string | undefined;
  /** For a master, its slot ranges as [first, last]. */
  slots: [number, number][];
}

const SIZE = 6;

export async function startRedisCluster(): Promise<TestCluster> {
  if (!hasRedisServer()) {
    throw new Error(
      `The cluster tests need ${redisServer} and redis-cli (Debian: apt-get install -y redis-server)`,
    );
  }
  const { dir, children, client, stop } = createProcessGroup('tollgate-cluster-');
  const ports: number[] = [];

  try {
    for (let i = 0; i < SIZE; i++) {
      const port = await freePort();
      // The bus port must be free too; port + 10000 may not be, so it is chosen the same way.
      const busPort = await freePort();
      ports.push(port);
      const child = spawn(
        redisServer,
        [
          '--port',
          String(port),
          '--cluster-port',
          String(busPort),
          '--bind',
          '127.0.0.1',
          '--cluster-enabled',
          'yes',
          '--cluster-config-file',
          join(dir, `nodes-${port}.conf`),
          '--cluster-node-timeout',
          '2000',
          '--save',
          '',
          '--appendonly',
          'no',
          '--enable-debug-command',
          'yes',
          '--dir',
          dir,
          '--logfile',
          join(dir, `redis-${port}.log`),
        ],
        { stdio: 'ignore' },
      );
      children.push(child);
    }
    await Promise.all(
      ports.map((port) =>
        waitFor(() =>
          client(port)
            .ping()
            .then(() => true),
        ),
      ),
    );
    const created = spawnSync(
      'redis-cli',
      [
        '--cluster',
        'create',
        ...ports.map((port) => `127.0.0.1:${port}`),
        '--cluster-replicas',
        '1',
        '--cluster-yes',
      ],
      { encoding: 'utf8', timeout: 30_000 },
    );
    if (created.status !== 0) {
      throw new Error(`redis-cli --cluster create failed: ${created.stdout}${created.stderr}`);
    }
  } catch (error) {
    await stop();
    throw error;
  }

  const nodes = async (): Promise<ClusterNode[]> => {
    let lastError: unknown;
    for (const port of ports) {
      try {
        return parseNodes(String(await client(port).call('CLUSTER', 'NODES')));
      } catch (error) {
        lastError = error;
      }
    }
    throw lastError;
  };
  const masterOf = async (slot: number) => {
    const master = (await nodes()).find(
      (node) =>
        node.role === 'master' && node.slots.some(([first, last]) => first <= slot && slot <= last),
    );
    if (!master) throw new Error(`no master serves slot ${slot}`);
    return master;
  };
  const settled = async (timeoutMs = 20_000) => {
    await waitFor(async () => {
      const views = await Promise.all(
        ports.map(async (port) => {
          const info = String(await client(port).call('CLUSTER', 'INFO'));
          if (!/cluster_state:ok/.test(info)) return undefined;
          const view = parseNodes(String(await client(port).call('CLUSTER', 'NODES')));
          return view
            .filter((node) => node.role === 'master' && node.slots.length > 0)
            .map((node) => `${node.port}:${JSON.stringify(node.slots)}`)
            .sort()
            .join(' ');
        }),
      );
      return views.every((view) => view !== undefined && view === views[0]);
    }, timeoutMs);
  };

  try {
    await settled(30_000);
  } catch (error) {
    await stop();
    throw error;
  }
  const migration = async (slot: number): Promise<SlotMigration> => {
    const source = await masterOf(slot);
    const target = (await nodes()).find(
      (node) => node.role === 'master' && node.slots.length > 0 && node.id !== source.id,
    )!;
    const admin = (port: number, ...args: (string | number)[]) =>
      client(port).call(String(args[0]), ...args.slice(1));
    const run = async (gapMs: number) => {
      await admin(target.port, 'CLUSTER', 'SETSLOT', slot, 'IMPORTING', source.id);
      await admin(source.port, 'CLUSTER', 'SETSLOT', slot, 'MIGRATING', target.id);
      const keys = (await admin(source.port, 'CLUSTER', 'GETKEYSINSLOT', slot, 1000)) as string[];
      for (const key of keys) {
        await admin(source.port, 'MIGRATE', '127.0.0.1', target.port, '', 0, 5_000, 'KEYS', key);
        await new Promise((resolve) => setTimeout(resolve, gapMs));
      }
      for (const node of [target, source]) {
        await admin(node.port, 'CLUSTER', 'SETSLOT', slot, 'NODE', target.id);
      }
      return keys;
    };
    return { source, target, run };
  };

  return {
    url: ports.map((port) => `redis://127.0.0.1:${port}`).join(','),
    ports,
    client,
    nodes,
    masterOf,
    settled,
    migration,
    stop,
  };
}

/** CLUSTER NODES: `id host:port@bus flags master-id ping pong epoch link slot...`. */
function parseNodes(text: string): ClusterNode[] {
  return text
    .trim()
    .split('\n')
    .map((line) => {
      const [id = '', address = '', flags = '', masterId = '', , , , , ...slots] = line
        .trim()
        .split(' ');
      const port = Number(/:(\d+)@/.exec(address)?.[1]);
      const master = flags.split(',').includes('master');
      return {
        id,
        port,
        role: master ? 'master' : 'replica',
        masterId: master ? undefined : masterId,
        slots: slots
          .filter((slot) => !slot.startsWith('['))
          .map((range) => {
            const [first, last = first] = range.split('-').map(Number);
            return [first, last] as [number, number];
          }),
      } satisfies ClusterNode;
    });
}

/**
 * Polls until `probe` resolves true, or fails after timeoutMs, naming the error of the last probe
 * when it threw one: an error of the first moments, before the servers listened, would say
 * nothing of why the condition still did not hold at the end.
 */
export async function waitFor(probe: () => Promise<boolean>, timeoutMs = 10_000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  let lastError: unknown;
  for (;;) {
    try {
      if (await probe()) return;
      lastError = undefined;
    } catch (error) {
      lastError = error;
    }
    if (Date.now() > deadline) {
      const why = lastError === undefined ? 'the last probe said no' : String(lastError);
      throw new Error(`condition not met within ${timeoutMs} ms (${why})`);
    }
    await new Promise((resolve) => setTimeout(resolve, 50));
  }
}

/** One call made under load: when it started (ms from the load's start), how long, its answer. */
export interface LoadCall {
  at: number;
  ms: number;
  /** OK, OVER_LIMIT, or the gRPC status name of a failed call (UNAVAILABLE, ...). */
  answer: string;
}

/**
 * Keeps `concurrency` calls in flight until `during` has resolved and `tailMs` more have passed,
 * and records every call. Shared by the cluster and sentinel fault tests.
 */
export async function underLoad(
  call: () => Promise<string>,
  options: { concurrency: number; tailMs: number },
  during: (elapsed: () => number) => Promise<void>,
): Promise<{ calls: LoadCall[]; window: [number, number] }> {
  const started = Date.now();
  const elapsed = () => Date.now() - started;
  const calls: LoadCall[] = [];
  let stopAt = Number.POSITIVE_INFINITY;
  const worker = async () => {
    while (Date.now() < stopAt) {
      const at = elapsed();
      const answer = await call().catch((error: { code?: number }) => statusName(error.code));
      calls.push({ at, ms: elapsed() - at, answer });
    }
  };
  const workers = Array.from({ length: options.concurrency }, worker);
  const from = elapsed();
  // A fault that fails must still stop the callers, or they would call on forever.
  let failure: { error: unknown } | undefined;
  await during(elapsed).catch((error: unknown) => (failure = { error }));
  const to = elapsed();
  stopAt = Date.now() + (failure ? 0 : options.tailMs);
  await Promise.all(workers);
  if (failure) throw failure.error;
  return { calls, window: [from, to] };
}

const STATUS_NAMES: Record<number, string> = {
  1: 'CANCELLED',
  2: 'UNKNOWN',
  4: 'DEADLINE_EXCEEDED',
  13: 'INTERNAL',
  14: 'UNAVAILABLE',
};

function statusName(code: number | undefined): string {
  return code === undefined ? 'ERROR' : (STATUS_NAMES[code] ?? `CODE_${code}`);
}

/** Calls, answers by kind, the slowest call and when failures happened, as a line of output. */
export function loadSummary(label: string, calls: LoadCall[]): string {
  const kinds: Record<string, number> = {};
  for (const { answer } of calls) kinds[answer] = (kinds[answer] ?? 0) + 1;
  const maxMs = Math.max(0, ...calls.map((call) => call.ms));
  const failed = calls.filter((call) => call.answer !== 'OK' && call.answer !== 'OVER_LIMIT');
  const span =
    failed.length === 0
      ? 'no failed call'
      : `failed calls started within ${Math.max(...failed.map((c) => c.at)) - Math.min(...failed.map((c) => c.at))} ms`;
  return `${label}: ${calls.length} calls, ${JSON.stringify(kinds)}, max latency ${maxMs} ms, ${span}`;
}

/** The cluster store's settings for a test cluster: every node named, no credentials, no TLS. */
export function clusterStoreSettings(cluster: TestCluster, timeoutMs = 2_000): RedisSettings {
  return {
    type: 'cluster',
    host: '127.0.0.1',
    port: cluster.ports[0]!,
    nodes: cluster.ports.map((port) => ({ host: '127.0.0.1', port })),
    username: undefined,
    password: undefined,
    db: 0,
    tls: undefined,
    timeoutMs,
  };
}
