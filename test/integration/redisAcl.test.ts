import { spawn, type ChildProcess } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { Redis } from 'ioredis';
import { afterAll, afterEach, beforeAll, describe, expect, it, vi } from 'vitest';
import { StoreError } from '../../src/core/errors.js';
import { counterKey } from '../../src/store/keys.js';
import type { RedisSettings } from '../../src/process/settings.js';
import { createRedisDemand } from '../../src/store/demand.js';
import { createRedisStore, type RedisStore } from '../../src/store/redisStore.js';
import type { FunctionsSetting } from '../../src/store/functions.js';
import type { Store } from '../../src/store/Store.js';
import { makeCerts, type TestCerts } from '../support/certs.js';
import { freePort } from '../support/ports.js';
import {
  startRedis,
  type TestRedis,
  README_ACL_COMMANDS,
  README_ACL_PUBSUB,
} from '../support/redis.js';
import { redisServer, redisServerHasTls } from '../support/redisServer.js';
import { subscribeToRefunds } from '../../src/store/invalidation.js';

// The Redis store over TLS (rediss://), and as a Redis ACL user that holds only what tollgate
// needs: README's ACL line, whose every command is shown to be needed.

const DAY_MS = 86_400_000;
const stores: RedisStore[] = [];
const errors: StoreError[] = [];

function store(settings: Partial<RedisSettings>, functions: FunctionsSetting = 'auto'): RedisStore {
  const created = createRedisStore(
    {
      type: 'single',
      host: '127.0.0.1',
      port: 0,
      username: undefined,
      password: undefined,
      db: 0,
      tls: undefined,
      timeoutMs: 2_000,
      ...settings,
    },
    { onError: (error) => errors.push(error), functions },
  );
  stores.push(created);
  return created;
}

afterEach(async () => {
  await Promise.all(stores.splice(0).map((s) => s.close()));
  errors.length = 0;
  vi.restoreAllMocks();
});

/** A counter of 3 a day for tenant acme (a day, so that no window ends mid-test). */
function counter(prefix: string) {
  const key = counterKey(
    prefix,
    'api',
    [{ key: 'tenant', value: 'acme' }],
    undefined,
    'fixed_window',
    DAY_MS,
  );
  const check = { key, algorithm: 'fixed_window' as const, windowMs: DAY_MS, limit: 3, burst: 3 };
  return { ...check, cost: 1, shadow: false, quota: false, overdraw: false };
}

/** Units left after each of `times` decisions on `store`'s counter (the store's clock). */
async function remaining(s: Store, prefix: string, times: number): Promise<number[]> {
  const left = [];
  for (let i = 0; i < times; i++) {
    const decision = await s.decide([counter(prefix)], undefined);
    left.push(decision.results[0]!.remaining);
  }
  return left;
}

const hasTls = redisServerHasTls();
if (!hasTls)
  console.warn(`${redisServer} cannot serve TLS: the tests of Redis over TLS are skipped`);

describe.skipIf(!hasTls)('Redis over TLS', () => {
  let certs: TestCerts;
  let redis: ChildProcess;
  let port: number;

  beforeAll(async () => {
    certs = makeCerts();
    port = await freePort();
    // TLS only, on two loopback addresses: the certificate names 127.0.0.1, not 127.0.0.2.
    redis = spawn(
      redisServer,
      [
        ...['--port', '0', '--tls-port', String(port), '--bind', '127.0.0.1', '127.0.0.2'],
        ...['--tls-cert-file', certs.server.cert, '--tls-key-file', certs.server.key],
        ...['--tls-ca-cert-file', certs.ca, '--tls-auth-clients', 'yes'],
        ...['--save', '', '--appendonly', 'no'],
      ],
      { stdio: 'ignore' },
    );
    await waitForTls(port, certs);
  });

  afterAll(() => {
    redis?.kill('SIGKILL');
  });

  const tls = () => ({
    caPath: certs.ca,
    clientCertPath: certs.client.cert,
    clientKeyPath: certs.client.key,
    skipHostnameVerification: false,
  });

  it('decides over rediss:// with the CA and a client certificate', async () => {
    const s = store({ port, tls: tls() });
    await s.ping();
    expect(await remaining(s, '', 2)).toEqual([2, 1]);
  });

  it('uses the CA and the client certificate it is given', async () => {
    await expect(store({ port, tls: { ...tls(), caPath: undefined } }).ping()).rejects.toThrow(
      StoreError,
    );
    // Redis sends its CA along, which the system's roots do not hold.
    expect(errors.map((e) => e.message)).toContain(
      `redis: not connected: TLS: the certificate of the server at 127.0.0.1:${port} is not ` +
        "trusted (self-signed certificate in certificate chain): REDIS_TLS_CACERT is unset, so only the system's " +
        'roots are trusted: set it to the CA that signed it',
    );
    errors.length = 0;

    const anonymous = { ...tls(), clientCertPath: undefined, clientKeyPath: undefined };
    await expect(store({ port, tls: anonymous }).ping()).rejects.toThrow(StoreError);
  });

  it('stops start-up on files it cannot use, naming the setting', () => {
    expect(() => store({ port, tls: { ...tls(), caPath: '/nonexistent/ca.crt' } })).toThrow(
      /^REDIS_TLS_CACERT: cannot read '\/nonexistent\/ca.crt'/,
    );
    expect(() => store({ port, tls: { ...tls(), caPath: certs.client.key } })).toThrow(
      /^REDIS_TLS_CACERT: not a certificate/,
    );
    expect(() => store({ port, tls: { ...tls(), clientKeyPath: certs.server.key } })).toThrow(
      /^REDIS_TLS_CLIENT_CERT, REDIS_TLS_CLIENT_KEY: not a certificate and its key/,
    );
  });

  it('verifies the host name unless REDIS_TLS_SKIP_HOSTNAME_VERIFICATION', async () => {
    await expect(store({ host: '127.0.0.2', port, tls: tls() }).ping()).rejects.toThrow(StoreError);
    expect(errors.map((e) => e.message)).toContainEqual(
      expect.stringMatching(/IP: 127\.0\.0\.2 is not in the cert's list/),
    );

    const skipping = store({
      host: '127.0.0.2',
      port,
      tls: { ...tls(), skipHostnameVerification: true },
    });
    await skipping.ping();
    expect(await remaining(skipping, 'skip:', 1)).toEqual([2]);
  });
});

describe('a least-privilege ACL user', () => {
  const COMMANDS = README_ACL_COMMANDS;
  /** README's ACL line for CACHE_KEY_PREFIX=`prefix`, with these commands. */
  const acl = (prefix: string, commands = COMMANDS, pubsub = README_ACL_PUBSUB) => [
    'on',
    '>secret',
    'resetkeys',
    `~${prefix}tg:*`,
    'resetchannels',
    ...pubsub.filter((rule) => rule.startsWith('&')),
    '-@all',
    ...commands,
    ...pubsub.filter((rule) => !rule.startsWith('&')),
  ];
  let redis: TestRedis;

  beforeAll(async () => {
    redis = await startRedis();
  });

  afterAll(async () => {
    await redis?.stop();
  });

  /**
   * A store as `user`, on a Redis that has forgotten the scripts and the library (so the first
   * call loads them), once its first connection chose how calls go.
   */
  async function storeAs(
    user: string,
    rules: string[],
    functions: FunctionsSetting = 'auto',
  ): Promise<RedisStore> {
    await redis.client.call('ACL', 'SETUSER', user, 'reset', ...rules);
    await redis.client.call('SCRIPT', 'FLUSH');
    await redis.client.call('FUNCTION', 'FLUSH');
    const s = store(
      { host: redis.host, port: redis.port, username: user, password: 'secret' },
      functions,
    );
    await s.firstConnection();
    return s;
  }

  /** RLQS demand on a rule's counter: a consumer expired, then another recorded (lua/demand.lua). */
  async function recordDemand(s: RedisStore, prefix: string) {
    const demand = createRedisDemand(s.access, { maxConsumers: 10 });
    const pool = `${counter(prefix).key}:rlqs`;
    await demand.record(pool, 'gone', 1, 60_000, 1_000);
    return demand.record(pool, 'live', 2, 60_000, 100_000);
  }

  it('decides, probes and resets with only the commands of the ACL line', async () => {
    const warn = vi.spyOn(console, 'warn');
    const prefix = 'edge1:';
    const s = await storeAs('tollgate', acl(prefix));
    expect(s.codePath().kind).toBe('functions');
    expect(await remaining(s, prefix, 2)).toEqual([2, 1]);
    const local = await s.decide([counter(prefix)], Date.now()); // CLOCK=local
    expect(local.results[0]!.remaining).toBe(0);
    expect(await s.exists([counter(prefix).key])).toBe(1);
    expect(await s.reset([counter(prefix).key])).toBe(1);
    expect(await s.exists([counter(prefix).key])).toBe(0);
    expect(await recordDemand(s, prefix)).toEqual({
      totalDemand: 2,
      consumers: 1,
      recorded: true,
    });
    // ioredis's ready check would need INFO, and warn on each connection without it.
    expect(warn).not.toHaveBeenCalled();
  });

  it('refuses the user anything else', async () => {
    const prefix = 'edge2:';
    const s = await storeAs('tollgate', acl(prefix));
    await expect(s.decide([counter('other:')], undefined)).rejects.toMatchObject({
      name: 'StoreError',
      kind: 'permission',
    });

    const raw = new Redis({
      host: redis.host,
      port: redis.port,
      username: 'tollgate',
      password: 'secret',
      enableReadyCheck: false,
    });
    try {
      for (const command of [['GET', counter(prefix).key], ['INFO'], ['FLUSHALL'], ['KEYS', '*']]) {
        await expect(raw.call(command[0]!, ...command.slice(1))).rejects.toThrow(/^NOPERM/);
      }
    } finally {
      raw.disconnect();
    }
  });

  // The line before functions: a user granted it keeps deciding, by EVALSHA, and is told why.
  const BEFORE_FUNCTIONS = COMMANDS.filter((c) => c !== '+fcall' && c !== '+function|load');

  it('keeps deciding as a user of the line before functions, by EVALSHA, naming what it lacks', async () => {
    const prefix = 'edge4:';
    const s = await storeAs('before-functions', acl(prefix, BEFORE_FUNCTIONS));
    expect(s.codePath()).toEqual({
      kind: 'scripts',
      detail: expect.stringContaining("may not run 'function|load': grant +fcall +function|load"),
    });
    expect(await remaining(s, prefix, 2)).toEqual([2, 1]);
    expect(await recordDemand(s, prefix)).toMatchObject({ recorded: true });
  });

  it('refuses to start such a user with REDIS_FUNCTIONS=on, naming the command', async () => {
    await redis.client.call(
      'ACL',
      'SETUSER',
      'no-fcall',
      'reset',
      ...acl(
        'edge5:',
        COMMANDS.filter((c) => c !== '+fcall'),
      ),
    );
    const s = store(
      { host: redis.host, port: redis.port, username: 'no-fcall', password: 'secret' },
      'on',
    );
    await expect(s.firstConnection()).rejects.toThrow(
      "REDIS_FUNCTIONS=on, but the Redis user may not run 'fcall'",
    );
  });

  it.each(['+fcall', '+function|load'])('calls functions only with %s', async (needed) => {
    const prefix = `edge6${needed.length}:`;
    const s = await storeAs(
      `without-${needed.slice(1).replace('|', '-')}`,
      acl(
        prefix,
        COMMANDS.filter((c) => c !== needed),
      ),
    );
    const command = needed.slice(1);
    expect(s.codePath()).toEqual({
      kind: 'scripts',
      detail: expect.stringContaining(`may not run '${command}'`),
    });
    expect(await remaining(s, prefix, 2)).toEqual([2, 1]);
  });

  /** A user's subscription to refund notices: live, or the reason it cannot be. */
  async function refundNotices(user: string, rules: string[]): Promise<string> {
    await redis.client.call('ACL', 'SETUSER', user, 'reset', ...rules);
    const connection = new Redis({
      host: redis.host,
      port: redis.port,
      username: user,
      password: 'secret',
      enableReadyCheck: false,
    });
    let refused: string | undefined;
    const coherence = subscribeToRefunds({
      connection,
      onRefused: (reason) => (refused = reason),
    });
    try {
      // What start-up waits on: it resolves once the subscription is live, or refused.
      await coherence.firstLive(20_000);
      return coherence.live() ? 'live' : (refused ?? 'neither live nor refused');
    } finally {
      await coherence.close();
      connection.disconnect();
    }
  }

  it('hears of refunds with the line, and says what a user without it lacks', async () => {
    expect(await refundNotices('notices', acl('edge7:'))).toBe('live');
    expect(await refundNotices('no-notices', acl('edge7:', COMMANDS, []))).toMatch(
      /^the Redis user may not SUBSCRIBE to tollgate:given-back: NOPERM/,
    );
    expect(
      await refundNotices(
        'no-publish',
        acl(
          'edge7:',
          COMMANDS,
          README_ACL_PUBSUB.filter((rule) => rule !== '+publish'),
        ),
      ),
    ).toMatch(/^the Redis user may not PUBLISH to tollgate:given-back: NOPERM/);
  });

  it('takes up a grant given after it was refused, without a restart', async () => {
    await redis.client.call(
      'ACL',
      'SETUSER',
      'granted-later',
      'reset',
      ...acl('edge8:', COMMANDS, []),
    );
    const connection = new Redis({
      host: redis.host,
      port: redis.port,
      username: 'granted-later',
      password: 'secret',
      enableReadyCheck: false,
    });
    const refused: string[] = [];
    const coherence = subscribeToRefunds({
      connection,
      onRefused: (reason) => refused.push(reason),
    });
    try {
      await coherence.firstLive(20_000);
      expect(coherence.live()).toBe(false);
      expect(refused).toHaveLength(1);
      await redis.client.call('ACL', 'SETUSER', 'granted-later', ...README_ACL_PUBSUB);
      // Tried again every 5 s, quietly.
      await vi.waitFor(() => expect(coherence.live()).toBe(true), {
        timeout: 20_000,
        interval: 100,
      });
      expect(refused).toHaveLength(1);
    } finally {
      await coherence.close();
      connection.disconnect();
    }
  });

  it.each(BEFORE_FUNCTIONS)('needs %s', async (needed) => {
    const prefix = 'edge3:';
    const s = await storeAs(
      `without-${needed.slice(1)}`,
      acl(
        prefix,
        COMMANDS.filter((c) => c !== needed),
      ),
    );
    const attempts = [
      () => remaining(s, prefix, 2),
      () => s.ping(),
      () => s.reset([counter(prefix).key]),
      () => s.exists([counter(prefix).key]),
      () => recordDemand(s, prefix),
    ];
    const failures: string[] = [];
    for (const attempt of attempts) {
      await attempt().catch((error: StoreError) => failures.push(error.message));
    }
    expect(failures).not.toEqual([]);
  });
});

/** Resolves once redis-server answers PING over TLS. */
async function waitForTls(port: number, certs: TestCerts): Promise<void> {
  const deadline = Date.now() + 10_000;
  for (;;) {
    const probe = new Redis({
      host: '127.0.0.1',
      port,
      lazyConnect: true,
      retryStrategy: () => null,
      tls: {
        ca: readFileSync(certs.ca),
        cert: readFileSync(certs.client.cert),
        key: readFileSync(certs.client.key),
      },
    });
    probe.on('error', () => undefined);
    try {
      await probe.connect();
      await probe.ping();
      return;
    } catch (error) {
      if (Date.now() > deadline) throw new Error(`redis-server with TLS did not start: ${error}`);
      await new Promise((resolve) => setTimeout(resolve, 50));
    } finally {
      probe.disconnect();
    }
  }
}
