import { spawn, type ChildProcess } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { connect as connectTls } from 'node:tls';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import type { StoreError } from '../../src/core/errors.js';
import type { RedisTls } from '../../src/store/redisSettings.js';
import { createRedisStore, type RedisStore } from '../../src/store/redisStore.js';
import { makeCerts, type TestCerts } from '../support/certs.js';
import { freePort } from '../support/ports.js';
import { spawnTollgate, type TollgateProcess } from '../support/processes.js';
import { startRedis, type TestRedis } from '../support/redis.js';
import { redisServer, redisServerHasTls } from '../support/redisServer.js';
import { eventually } from '../support/tollgate.js';

// TLS mistakes reach ioredis as a timeout, a reset connection or a protocol error. Each must be
// named as a TLS mistake, with what to check, in the store's error (which health's reason and
// the logs carry): rediss:// to a plain-text port, redis:// to a TLS port, a server certificate
// that REDIS_TLS_CACERT does not trust, and a client certificate that the server refuses.

let certs: TestCerts;
/** Another CA, with its own server and client certificates. */
let strangers: TestCerts;
let plain: TestRedis;
let tlsServer: ChildProcess;
let tlsPort: number;
const stores: RedisStore[] = [];
let errors: string[] = [];
const running: TollgateProcess[] = [];
const hasTls = redisServerHasTls();
if (!hasTls) console.warn(`${redisServer} cannot serve TLS: the tests of TLS mistakes are skipped`);

beforeAll(async () => {
  if (!hasTls) return;
  certs = makeCerts();
  strangers = makeCerts();
  plain = await startRedis();
  tlsPort = await freePort();
  tlsServer = spawn(
    redisServer,
    [
      ...['--port', '0', '--tls-port', String(tlsPort), '--bind', '127.0.0.1'],
      ...['--tls-cert-file', certs.server.cert, '--tls-key-file', certs.server.key],
      ...['--tls-ca-cert-file', certs.ca, '--tls-auth-clients', 'yes'],
      ...['--save', '', '--appendonly', 'no'],
    ],
    { stdio: 'ignore' },
  );
  await eventually(() => handshakes(tlsPort));
});

afterEach(async () => {
  await Promise.all(stores.splice(0).map((s) => s.close()));
  await Promise.all(running.splice(0).map((t) => t.stop()));
  errors = [];
});

afterAll(async () => {
  tlsServer?.kill('SIGKILL');
  await plain?.stop();
});

function handshakes(port: number): Promise<boolean> {
  return new Promise((resolve) => {
    const socket = connectTls({ host: '127.0.0.1', port, ca: readFileSync(certs.ca) });
    socket.once('secureConnect', () => resolve(true));
    socket.once('error', () => resolve(false));
    socket.once('close', () => socket.destroy());
  });
}

function store(port: number, tls: RedisTls | undefined): RedisStore {
  const created = createRedisStore(
    {
      type: 'single',
      host: '127.0.0.1',
      port,
      username: undefined,
      password: undefined,
      db: 0,
      tls,
      timeoutMs: 1_000,
    },
    { onError: (error: StoreError) => errors.push(error.message) },
  );
  stores.push(created);
  return created;
}

const tls = (overrides: Partial<RedisTls> = {}): RedisTls => ({
  caPath: certs.ca,
  clientCertPath: certs.client.cert,
  clientKeyPath: certs.client.key,
  skipHostnameVerification: false,
  ...overrides,
});

/** The first error the store reported, once it has reported one. */
async function firstError(): Promise<string> {
  await eventually(async () => errors.length > 0);
  return errors[0]!;
}

describe.skipIf(!hasTls)('TLS mistakes, named', () => {
  it('rediss:// to a plain-text port', async () => {
    store(plain.port, tls());
    expect(await firstError()).toMatch(
      new RegExp(
        `^redis: not connected: TLS is on \\(rediss:// or REDIS_TLS=true\\), but the server at ` +
          `127\\.0\\.0\\.1:${plain.port} did not answer (a TLS handshake|the TLS handshake in TLS ` +
          `\\(.*\\)): is it a plain-text port\\? use redis://$`,
      ),
    );
  });

  it('redis:// to a TLS port', async () => {
    const s = store(tlsPort, undefined);
    expect(await firstError()).toMatch(
      new RegExp(
        `^redis: not connected: the server at 127\\.0\\.0\\.1:${tlsPort} (closed the connection ` +
          `before answering anything: is it a TLS port\\? use rediss://|answered in TLS: use ` +
          `rediss:// \\(or REDIS_TLS=true\\))$`,
      ),
    );
    // A call made meanwhile is refused with the same reason.
    await expect(s.ping()).rejects.toThrow(/TLS/);
  });

  it('a server certificate REDIS_TLS_CACERT does not trust', async () => {
    store(tlsPort, tls({ caPath: strangers.ca }));
    expect(await firstError()).toBe(
      `redis: not connected: TLS: the certificate of the server at 127.0.0.1:${tlsPort} is not ` +
        'trusted (self-signed certificate in certificate chain): REDIS_TLS_CACERT must name the ' +
        'CA that signed it',
    );
  });

  it('a client certificate the server refuses, or none', async () => {
    store(
      tlsPort,
      tls({ clientCertPath: strangers.client.cert, clientKeyPath: strangers.client.key }),
    );
    expect(await firstError()).toMatch(
      new RegExp(
        `^redis: not connected: TLS: the server at 127\\.0\\.0\\.1:${tlsPort} refused the client ` +
          `certificate \\(.*\\): check REDIS_TLS_CLIENT_CERT and REDIS_TLS_CLIENT_KEY, and that ` +
          `the server's tls-ca-cert-file signed it$`,
      ),
    );
    errors = [];
    store(tlsPort, tls({ clientCertPath: undefined, clientKeyPath: undefined }));
    expect(await firstError()).toMatch(
      new RegExp(
        `^redis: not connected: TLS: the server at 127\\.0\\.0\\.1:${tlsPort} asks for a client ` +
          `certificate \\(.*\\): set REDIS_TLS_CLIENT_CERT and REDIS_TLS_CLIENT_KEY$`,
      ),
    );
  });

  it('at start-up and in health, from the service', async () => {
    const tollgate = await spawnTollgate(
      'domain: api\ndescriptors:\n  - key: tenant\n    rate_limit: {unit: minute, requests_per_unit: 5}\n',
      {
        REDIS_URL: `rediss://127.0.0.1:${tlsPort}`,
        REDIS_TLS_CACERT: strangers.ca,
        REDIS_TLS_CLIENT_CERT: certs.client.cert,
        REDIS_TLS_CLIENT_KEY: certs.client.key,
      },
      { anyHealth: true, captureStdout: true },
    );
    running.push(tollgate);
    const response = await fetch(`${tollgate.httpUrl}/healthcheck`);
    expect([response.status, await response.text()]).toEqual([
      500,
      'NOT_SERVING: store unreachable (FAILURE_MODE=error): redis: not connected: TLS: the ' +
        `certificate of the server at 127.0.0.1:${tlsPort} is not trusted (self-signed ` +
        'certificate in certificate chain): REDIS_TLS_CACERT must name the CA that signed it',
    ]);
    const logged = tollgate
      .stdout()
      .split('\n')
      .filter((line) => line.includes('store unreachable'))
      .map((line) => (JSON.parse(line) as { reason: string }).reason);
    expect(logged[0]).toMatch(/^redis: not connected: TLS: the certificate of the server at /);
  });
});
