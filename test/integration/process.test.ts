import { writeFileSync } from 'node:fs';
import { createServer, connect, type Server } from 'node:net';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { freePort } from '../support/ports.js';
import {
  refusal,
  runToExit as runProcessToExit,
  spawnTollgate,
  type TollgateProcess,
} from '../support/processes.js';
import { startRedis, type TestRedis } from '../support/redis.js';
import { callCheck, d, eventually, writeRules } from '../support/tollgate.js';

// The process as an operator meets it: ports that are taken, the signals operators send, the
// line that says at start-up what runs, and no password in anything it prints or serves.

const RULES = (limit: number) => `
domain: proc
descriptors:
  - key: tenant
    rate_limit: {unit: minute, requests_per_unit: ${limit}}
`;
const PASSWORD = 'S3cretPW';

let redis: TestRedis;
const running: TollgateProcess[] = [];
beforeAll(async () => {
  redis = await startRedis();
});
afterAll(async () => {
  await Promise.all(running.map((t) => t.stop()));
  await redis?.stop();
});

async function spawnKept(env: Record<string, string>, rules = RULES(1000)) {
  const tollgate = await spawnTollgate(
    rules,
    { LOG_LEVEL: 'info', ...env },
    { captureStdout: true },
  );
  running.push(tollgate);
  return tollgate;
}

const runToExit = (env: Record<string, string>) => runProcessToExit(RULES(10), env);

async function squat(): Promise<{ port: number; server: Server }> {
  const port = await freePort();
  const server = createServer();
  await new Promise<void>((resolve) => server.listen(port, '127.0.0.1', resolve));
  return { port, server };
}

describe('a port in use', () => {
  it.each([
    ['GRPC_PORT', {}],
    ['PORT', {}],
    ['GRPC_PORT', { WORKERS: '2' }],
  ])(
    '%s %j: one line naming the setting and the port, exit 1',
    async (setting, extra: Record<string, string>) => {
      const { port, server } = await squat();
      try {
        const env = {
          [setting]: String(port),
          ...extra,
          ...(extra.WORKERS ? { REDIS_URL: redis.url } : {}),
        };
        const { code, stdout, stderr } = await runToExit(env);
        expect(code).toBe(1);
        expect(refusal(stderr)).toBe(
          `${setting}: 127.0.0.1:${port} is already in use by another process`,
        );
        // Nor does grpc-js say it first, in the log.
        expect(stdout).not.toContain('No address added');
      } finally {
        server.close();
      }
    },
    60_000,
  );
});

describe('signals', () => {
  it('SIGHUP reloads the rules while calls go on, and the process keeps serving', async () => {
    const rulesPath = writeRules(RULES(1000));
    // Changes wait an hour to settle: only SIGHUP can load them now.
    const tollgate = await spawnKept({ CONFIG_PATH: rulesPath, CONFIG_SETTLE_TIME: '1h' });
    const limit = async () =>
      (await callCheck(tollgate.client, { domain: 'proc', descriptors: [d('tenant', 'x')] }))
        .statuses?.[0]?.current_limit?.requests_per_unit;
    expect(await limit()).toBe(1000);
    writeFileSync(rulesPath, RULES(77));
    let stopped = false;
    let failed = 0;
    let calls = 0;
    const load = (async () => {
      while (!stopped) {
        await callCheck(tollgate.client, {
          domain: 'proc',
          descriptors: [d('tenant', 'load')],
        }).catch(() => (failed += 1));
        calls += 1;
      }
    })();
    await new Promise((resolve) => setTimeout(resolve, 200));
    tollgate.child.kill('SIGHUP');
    await eventually(async () => (await limit()) === 77, 10_000);
    await new Promise((resolve) => setTimeout(resolve, 200));
    stopped = true;
    await load;
    expect(failed).toBe(0);
    expect(calls).toBeGreaterThan(10);
    expect(tollgate.child.exitCode).toBeNull();
    expect(tollgate.stdout()).toContain('"signal":"SIGHUP"');
  });

  it('SIGUSR1, SIGUSR2 and SIGQUIT neither end it nor open the inspector', async () => {
    // A check after each signal shows the process still serves; the default 15 ms for Redis is a
    // production bound that a loaded test machine can miss, and not what this test is about.
    const tollgate = await spawnKept({ REDIS_URL: redis.url, REDIS_TIMEOUT: '2s' });
    for (const signal of ['SIGUSR1', 'SIGUSR2', 'SIGQUIT'] as const) {
      tollgate.child.kill(signal);
      await new Promise((resolve) => setTimeout(resolve, 300));
      expect(tollgate.child.exitCode, signal).toBeNull();
      expect(tollgate.child.signalCode, signal).toBeNull();
      const answer = await callCheck(tollgate.client, {
        domain: 'proc',
        descriptors: [d('tenant', signal)],
      });
      expect(answer.overall_code).toBe('OK');
    }
    const inspector = await new Promise<boolean>((resolve) => {
      const socket = connect(9229, '127.0.0.1');
      socket.once('connect', () => {
        socket.destroy();
        resolve(true);
      });
      socket.once('error', () => resolve(false));
    });
    expect(inspector).toBe(false);
    expect(tollgate.stdout().match(/signal ignored/g)).toHaveLength(3);
  });
});

describe('the start-up line', () => {
  it('names the store without its password, the rules, the failure mode and the timeout', async () => {
    await redis.client.call('ACL', 'SETUSER', 'proc', 'on', `>${PASSWORD}`, '~*', '&*', '+@all');
    const tollgate = await spawnKept({
      REDIS_URL: `redis://proc:${PASSWORD}@127.0.0.1:${redis.port}`,
      EXPIRATION_JITTER_MAX_SECONDS: '300',
      LOCAL_CACHE_SIZE_IN_BYTES: '1000000',
      REDIS_PERSECOND_URL: `redis://proc:${PASSWORD}@127.0.0.1:1`,
      STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT: 'true',
      STATSD_HOST: 'statsd.internal',
    });
    const lines = tollgate
      .stdout()
      .split('\n')
      .filter(Boolean)
      .map((line) => JSON.parse(line) as Record<string, unknown>);
    const listening = lines.find((line) => line.msg === 'listening');
    expect(listening).toMatchObject({
      store: `redis redis://127.0.0.1:${redis.port}`,
      rules: { domains: 1, rules: 1 },
      failureMode: 'error',
      redisTimeoutMs: 15,
      compatMode: 'off',
      statsd: 'off (USE_STATSD=true to send it; the reference sends it by default)',
    });
    const warnings = lines.filter((line) => line.level === 40).map((line) => line.msg);
    expect(warnings).toEqual([
      'STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT=true is read only under COMPAT_MODE=reference: without it, a denied request never increments any counter',
      'STATSD_HOST is set but statsd is off: tollgate sends statsd only with USE_STATSD=true (the reference sends it by default)',
      'EXPIRATION_JITTER_MAX_SECONDS=300 is set but not used by tollgate: counters expire exactly when they stop mattering',
      'LOCAL_CACHE_SIZE_IN_BYTES=1000000 is set but not used by tollgate: the over-limit cache is OVER_LIMIT_CACHE_SIZE, in entries (under COMPAT_MODE=reference, a size above 0 turns it on)',
      'REDIS_PERSECOND_URL is set but not used by tollgate: per-second limits share the one Redis of REDIS_URL',
    ]);
    expect(tollgate.stdout()).not.toContain(PASSWORD);
  });

  it('warns at once when REDIS_URL is unset: counters are per process', async () => {
    const tollgate = await spawnKept({});
    const listening = tollgate
      .stdout()
      .split('\n')
      .find((line) => line.includes('"listening"'));
    expect(JSON.parse(listening ?? '{}').store).toBe('memory (this process only)');
    expect(tollgate.stdout()).toContain(
      'REDIS_URL is unset: counters are kept in this process only, and other instances or workers do not share them',
    );
  });
});

describe('credentials', () => {
  it('appear in no log line, no answer, no metric and no endpoint, at the debug level, when Redis refuses them', async () => {
    const tollgate = await spawnKept({
      REDIS_URL: `redis://nobody:${PASSWORD}@127.0.0.1:${redis.port}`,
      REDIS_TIMEOUT: '200ms',
      LOG_LEVEL: 'trace',
      FAILURE_MODE: 'allow',
    });
    await callCheck(tollgate.client, { domain: 'proc', descriptors: [d('tenant', 'x')] });
    await new Promise((resolve) => setTimeout(resolve, 1_500));
    const served = await Promise.all(
      ['/healthcheck', '/metrics', '/rlconfig'].map(async (path) =>
        (await fetch(`${tollgate.httpUrl}${path}`)).text(),
      ),
    );
    expect(served[0]).toMatch(
      /^OK: store refuses checks, answering per FAILURE_MODE=allow: redis: refused the credentials: WRONGPASS/,
    );
    for (const text of [tollgate.stdout(), tollgate.stderr(), ...served])
      expect(text).not.toContain(PASSWORD);
  });

  it('appear in no start-up error for a malformed URL', async () => {
    const { code, stderr } = await runToExit({
      REDIS_URL: `redis://proc:${PASSWORD}@h1:1,redis://proc:${PASSWORD}@h2:2`,
    });
    expect(code).toBe(1);
    expect(refusal(stderr)).toBe(
      "REDIS_URL: a list of nodes needs REDIS_TYPE=cluster ('redis://proc:***@h1:1,redis://proc:***@h2:2')",
    );
  });
});
