// Differential: COMPAT_KEYS=reference, the reference's own counters shared with it during a
// cut-over. The reference and tollgate serve one Redis at once, alternately and together, and the
// counts stay exact: every answer is the one a single service would have given (the local caches
// off, default counting), on a single Redis and on Redis Cluster. With the reference's change
// that adds refunds built (see refunds.test.ts), a refund through either counts for both.
import { spawnSync } from 'node:child_process';
import { existsSync, mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { RateLimitClient, RateLimitResponseObject } from '@tollgate/client';
import type { Cluster, Redis } from 'ioredis';
import { spawnTollgate, type TollgateProcess } from '../support/processes.js';
import { startRedis, type TestRedis } from '../support/redis.js';
import { startRedisCluster, type TestCluster } from '../support/redisCluster.js';
import { callCheck, d } from '../support/tollgate.js';
import { startReference, type ReferenceProcess } from './reference.js';

const RULES = `
domain: cutover
descriptors:
  - key: tenant
    rate_limit: { unit: day, requests_per_unit: 1000 }
  - key: user
    rate_limit: { unit: day, requests_per_unit: 10 }
  - key: tokens
    rate_limit: { unit: day, requests_per_unit: 10 }
`;

const DAY_S = 86_400;
const REFUNDS_BINARY =
  process.env.TOLLGATE_REFERENCE_REFUNDS_BIN ?? join('.cache', 'reference-refunds', 'service_cmd');

/** The reference's key for a descriptor of `cutover`, in today's window (UTC days). */
const keyOf = (key: string, value: string) => {
  const now = Math.floor(Date.now() / 1000);
  return `cutover_${key}_${value}_${now - (now % DAY_S)}`;
};

/** Waits out the last minute of a UTC day, so that a scenario's calls share one window. */
async function clearOfDayEnd(): Promise<void> {
  const left = DAY_S * 1000 - (Date.now() % (DAY_S * 1000));
  if (left < 60_000) await new Promise((resolve) => setTimeout(resolve, left + 1_000));
}

interface Backend {
  name: string;
  start(): Promise<{ referenceEnv: Record<string, string>; tollgateEnv: Record<string, string> }>;
  /** A client of the Redis the services share, for the counts. */
  client(): Redis | Cluster;
  stop(): Promise<void>;
}

function singleRedis(): Backend {
  let redis: TestRedis | undefined;
  return {
    name: 'a single Redis',
    async start() {
      redis = await startRedis();
      const url = `127.0.0.1:${redis.port}`;
      return { referenceEnv: { REDIS_URL: url }, tollgateEnv: { REDIS_URL: url } };
    },
    client: () => redis!.client,
    stop: async () => redis?.stop(),
  };
}

function redisCluster(): Backend {
  let cluster: TestCluster | undefined;
  let client: Cluster | undefined;
  return {
    name: 'Redis Cluster',
    async start() {
      cluster = await startRedisCluster();
      const { Cluster } = await import('ioredis');
      client = new Cluster(cluster.ports.slice(0, 1).map((port) => ({ host: '127.0.0.1', port })));
      const env = { REDIS_TYPE: 'cluster', REDIS_URL: cluster.url };
      return { referenceEnv: env, tollgateEnv: env };
    },
    client: () => client!,
    async stop() {
      client?.disconnect();
      await cluster?.stop();
    },
  };
}

interface Services {
  reference: ReferenceProcess;
  tollgate: TollgateProcess;
  /** The rules directory, and the settings tollgate runs with. */
  rulesDir: string;
  env: Record<string, string>;
}

async function startServices(
  backend: Backend,
  referenceBinary?: string,
): Promise<Services & { redis: Redis | Cluster }> {
  const { referenceEnv, tollgateEnv } = await backend.start();
  const rulesDir = mkdtempSync(join(tmpdir(), 'tollgate-shared-'));
  writeFileSync(join(rulesDir, 'cutover.yaml'), RULES);
  const env = { COMPAT_MODE: 'reference', COMPAT_KEYS: 'reference', ...tollgateEnv };
  const [reference, tollgate] = await Promise.all([
    startReference(
      { 'cutover.yaml': RULES },
      referenceEnv.REDIS_URL ?? '',
      referenceEnv,
      referenceBinary,
    ),
    spawnTollgate('', { CONFIG_PATH: rulesDir, REDIS_TIMEOUT: '2s', ...env }),
  ]);
  return { reference, tollgate, rulesDir, env, redis: backend.client() };
}

const ask = (client: RateLimitClient, key: string, value: string, hits?: number, refund = false) =>
  callCheck(
    client,
    {
      domain: 'cutover',
      descriptors: [
        {
          ...d(key, value),
          ...(hits === undefined ? {} : { hits_addend: { value: String(hits) } }),
          ...(refund ? { is_negative_hits: true } : {}),
        },
      ],
    },
    10_000,
  );

/** What an answer says of its one descriptor: OVER_LIMIT, or OK and what is left. */
const said = (response: RateLimitResponseObject) => {
  const status = response.statuses?.[0];
  return response.overall_code === 'OK' ? (status?.limit_remaining ?? 0) : 'OVER_LIMIT';
};

/**
 * `calls` calls on one descriptor, sent at once, each to the service `via` picks. Resolves with
 * the remaining counts the OK answers gave, sorted, and how many were OVER_LIMIT.
 */
async function together(
  services: Services,
  value: string,
  calls: number,
  via: (i: number) => 'reference' | 'tollgate',
): Promise<{ remaining: number[]; over: number }> {
  const answers = await Promise.all(
    Array.from({ length: calls }, (_, i) =>
      ask(services[via(i)].client, 'tenant', value).then(said),
    ),
  );
  const remaining = answers.filter((a): a is number => a !== 'OVER_LIMIT').sort((a, b) => a - b);
  return { remaining, over: answers.length - remaining.length };
}

/** `count` consecutive integers from `from`. */
const range = (from: number, count: number) => Array.from({ length: count }, (_, i) => from + i);

describe.each([
  ['a single Redis', singleRedis],
  ['Redis Cluster', redisCluster],
])('COMPAT_KEYS=reference on %s', (_name, make) => {
  const backend = make();
  let services: Services & { redis: Redis | Cluster };

  beforeAll(async () => {
    services = await startServices(backend);
  }, 120_000);
  afterAll(async () => {
    await Promise.all([services?.reference.stop(), services?.tollgate.stop()]);
    await backend.stop();
  });

  it(`${backend.name}: writes the reference's own key, a plain count, and counts on from its count`, async () => {
    await clearOfDayEnd();
    const key = keyOf('user', 'keys');
    expect(said(await ask(services.tollgate.client, 'user', 'keys'))).toBe(9);
    expect(await services.redis.get(key)).toBe('1');
    expect(said(await ask(services.reference.client, 'user', 'keys', 3))).toBe(6);
    expect(said(await ask(services.tollgate.client, 'user', 'keys'))).toBe(5);
    expect(await services.redis.get(key)).toBe('5');
    // The reference's TTL: the window, plus its expiry jitter (up to 300 s by default).
    const ttl = await services.redis.ttl(key);
    expect(ttl).toBeGreaterThan(DAY_S - 60);
    expect(ttl).toBeLessThanOrEqual(DAY_S + 300);
  });

  it(`${backend.name}: tollgate counters reads and resets the reference's own key`, async () => {
    await clearOfDayEnd();
    const counters = (action: string) =>
      spawnSync(
        process.execPath,
        [
          ...['dist/cli/main.js', 'counters', action, '--config', services.rulesDir],
          ...['--domain', 'cutover', '--descriptor', 'user=cli'],
        ],
        { env: { ...process.env, ...services.env }, encoding: 'utf8' },
      );
    expect(said(await ask(services.reference.client, 'user', 'cli', 3))).toBe(7);
    const get = counters('get');
    expect(get.stderr).toBe('');
    expect(get.stdout).toContain(`key ${JSON.stringify(keyOf('user', 'cli'))}\n`);
    expect(get.stdout).toContain('remaining 7 of 10\n');
    const reset = counters('reset');
    expect(reset.stdout).toContain('reset: the counter existed and is deleted\n');
    // The reference starts the window again from nothing.
    expect(said(await ask(services.reference.client, 'user', 'cli'))).toBe(9);
  });

  it(`${backend.name}: alternately, every answer is the one a single service would give`, async () => {
    await clearOfDayEnd();
    const answers = [];
    for (let i = 0; i < 14; i++) {
      const via = i % 2 === 0 ? services.reference : services.tollgate;
      answers.push(said(await ask(via.client, 'user', 'alternate')));
    }
    expect(answers).toEqual([9, 8, 7, 6, 5, 4, 3, 2, 1, 0, ...Array(4).fill('OVER_LIMIT')]);
    expect(await services.redis.get(keyOf('user', 'alternate'))).toBe('14');
  });

  it(`${backend.name}: 2,000 calls at once through both count exactly, each answer once`, async () => {
    await clearOfDayEnd();
    const { remaining, over } = await together(services, 'together', 2_000, (i) =>
      i % 2 === 0 ? 'reference' : 'tollgate',
    );
    // Each call's count after it is its own: the OK answers left 999, 998, ... 0 once each.
    expect(remaining).toEqual(range(0, 1_000));
    expect(over).toBe(1_000);
    expect(await services.redis.get(keyOf('tenant', 'together'))).toBe('2000');
  }, 60_000);

  it(`${backend.name}: the cut-over runbook, reference, both, tollgate, reference again, stays exact`, async () => {
    // Before: the reference's rules files pass check-config in the instances' environment.
    const checked = spawnSync(
      process.execPath,
      ['dist/cli/main.js', 'check-config', services.rulesDir],
      { env: { ...process.env, ...services.env }, encoding: 'utf8' },
    );
    expect(checked.stderr).toBe('');
    expect(checked.status).toBe(0);
    await clearOfDayEnd();
    const phase = (calls: number, via: (i: number) => 'reference' | 'tollgate') =>
      together(services, 'runbook', calls, via);
    // Before: the reference alone.
    expect(await phase(300, () => 'reference')).toEqual({ remaining: range(700, 300), over: 0 });
    // During: both, as a fleet moves instance by instance.
    expect(await phase(400, (i) => (i % 3 === 0 ? 'tollgate' : 'reference'))).toEqual({
      remaining: range(300, 400),
      over: 0,
    });
    // After: tollgate alone, past the limit.
    expect(await phase(400, () => 'tollgate')).toEqual({ remaining: range(0, 300), over: 100 });
    // Rollback: the reference again, on the same count.
    expect(await phase(100, () => 'reference')).toEqual({ remaining: [], over: 100 });
    expect(await services.redis.get(keyOf('tenant', 'runbook'))).toBe('1200');
  }, 60_000);
});

describe.runIf(existsSync(REFUNDS_BINARY))(
  'COMPAT_KEYS=reference with refunds, beside the reference that has them (5a56d24)',
  () => {
    const backend = singleRedis();
    let services: Services & { redis: Redis | Cluster };

    beforeAll(async () => {
      services = await startServices(backend, REFUNDS_BINARY);
    }, 120_000);
    afterAll(async () => {
      await Promise.all([services?.reference.stop(), services?.tollgate.stop()]);
      await backend.stop();
    });

    it('a refund through either service counts for both, floored at 0', async () => {
      await clearOfDayEnd();
      const { reference, tollgate } = services;
      expect(said(await ask(reference.client, 'tokens', 't', 5))).toBe(5);
      expect(said(await ask(tollgate.client, 'tokens', 't', 3, true))).toBe(8);
      expect(said(await ask(reference.client, 'tokens', 't', 1))).toBe(7);
      expect(said(await ask(reference.client, 'tokens', 't', 2, true))).toBe(9);
      expect(said(await ask(tollgate.client, 'tokens', 't', 5, true))).toBe(10);
      expect(await services.redis.get(keyOf('tokens', 't'))).toBe('0');
      // No key is made for a refund of nothing counted.
      expect(said(await ask(tollgate.client, 'tokens', 'none', 4, true))).toBe(10);
      expect(await services.redis.exists(keyOf('tokens', 'none'))).toBe(0);
    });
  },
);
