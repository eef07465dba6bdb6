import { copyFileSync, mkdtempSync, readFileSync, renameSync } from 'node:fs';
import { connect as connectHttp2, type ClientHttp2Session } from 'node:http2';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { connect as connectTls } from 'node:tls';
import * as grpc from '@grpc/grpc-js';
import { afterEach, beforeAll, describe, expect, it } from 'vitest';
import type { Check } from '../../src/core/check.js';
import { SettingsError } from '../../src/core/errors.js';
import {
  createServerCredentials,
  type ServerCredentialsOptions,
} from '../../src/servers/grpc/credentials.js';
import { createRateLimitClient, type RateLimitClient } from '@tollgate/client';
import { createGrpcServer, type GrpcServer, type Reply } from '../../src/servers/grpc/server.js';
import { grpcServerOptions, guardOptions } from '../../src/servers/grpc/serverOptions.js';
import { readSettings } from '../../src/process/settings.js';
import { CLIENT_SAN, makeCerts, type TestCerts } from '../support/certs.js';
import { callCheck, eventually } from '../support/tollgate.js';

// The gRPC server built as service.ts builds it, from settings read from the environment, over
// TLS; the decisions come from a stub, since only the transport is under test here.

const decide = async (check: Check): Promise<Reply> => ({
  code: 'OK',
  statuses: check.descriptors.map(() => ({ code: 'OK', limitRemaining: 7 })),
});
const request = { domain: 'api', descriptors: [{ entries: [{ key: 'tenant', value: 'acme' }] }] };

let certs: TestCerts;
const servers: GrpcServer[] = [];
const clients: RateLimitClient[] = [];
const sessions: ClientHttp2Session[] = [];

beforeAll(() => {
  certs = makeCerts();
});

afterEach(async () => {
  for (const client of clients.splice(0)) client.close();
  for (const session of sessions.splice(0)) session.destroy();
  await Promise.all(servers.splice(0).map((server) => server.shutdown(100)));
});

/** Starts the server from these settings; resolves with its port. */
async function start(
  env: Record<string, string>,
  options: ServerCredentialsOptions = {},
): Promise<number> {
  const settings = readSettings(env).grpcServer;
  const server = createGrpcServer({
    decide,
    limits: { maxDescriptors: 64, maxEntries: 16, maxEntryBytes: 1024 },
    serverOptions: grpcServerOptions(settings),
    guard: guardOptions(settings),
    credentials: createServerCredentials(settings.tls, options),
  });
  servers.push(server);
  return server.listen('127.0.0.1', 0);
}

function tlsEnv(cert = certs.server.cert, key = certs.server.key): Record<string, string> {
  return { GRPC_SERVER_USE_TLS: 'true', GRPC_SERVER_TLS_CERT: cert, GRPC_SERVER_TLS_KEY: key };
}

function client(port: number, credentials: grpc.ChannelCredentials): RateLimitClient {
  // By name, as Envoy would: TLS sends no IP address as the server name.
  const created = createRateLimitClient(`localhost:${port}`, credentials);
  clients.push(created);
  return created;
}

const trusting = (withClientCert = false) =>
  grpc.credentials.createSsl(
    readFileSync(certs.ca),
    withClientCert ? readFileSync(certs.client.key) : null,
    withClientCert ? readFileSync(certs.client.cert) : null,
  );

/** The gRPC status name a call fails with. */
const failure = (port: number, credentials: grpc.ChannelCredentials) =>
  callCheck(client(port, credentials), request, 3_000).then(
    () => 'the call succeeded',
    (error: grpc.ServiceError) => grpc.status[error.code],
  );

function replace(path: string, by: string): void {
  copyFileSync(by, `${path}.new`);
  renameSync(`${path}.new`, path);
}

/** The serial number of the certificate that a new TLS connection is served. */
function servedSerial(port: number): Promise<string> {
  return new Promise((resolve, reject) => {
    const socket = connectTls({
      host: '127.0.0.1',
      port,
      ca: readFileSync(certs.ca),
      ALPNProtocols: ['h2'],
    });
    socket.once('secureConnect', () => {
      resolve(socket.getPeerCertificate().serialNumber);
      socket.destroy();
    });
    socket.once('error', reject);
  });
}

describe('TLS', () => {
  it('serves a client that trusts the CA, and no client that does not speak TLS', async () => {
    const port = await start(tlsEnv());
    const response = await callCheck(client(port, trusting()), request);
    expect(response.statuses?.[0]?.limit_remaining).toBe(7);
    expect(await servedSerial(port)).toBe(certs.server.serialNumber);
    expect(await failure(port, grpc.credentials.createInsecure())).toBe('UNAVAILABLE');
  });

  it('with a client CA, refuses a client without a certificate and serves one with it', async () => {
    const port = await start({ ...tlsEnv(), GRPC_CLIENT_TLS_CACERT: certs.ca });
    expect(await failure(port, trusting())).toBe('UNAVAILABLE');
    const response = await callCheck(client(port, trusting(true)), request);
    expect(response.statuses?.[0]?.limit_remaining).toBe(7);
  });

  it('with GRPC_CLIENT_TLS_SAN, serves only the client certificate for that name', async () => {
    const mutual = { ...tlsEnv(), GRPC_CLIENT_TLS_CACERT: certs.ca };
    const matching = await start({ ...mutual, GRPC_CLIENT_TLS_SAN: CLIENT_SAN });
    const response = await callCheck(client(matching, trusting(true)), request);
    expect(response.statuses?.[0]?.limit_remaining).toBe(7);

    const other = await start({ ...mutual, GRPC_CLIENT_TLS_SAN: 'other.tollgate.test' });
    const error = await callCheck(client(other, trusting(true)), request).then(
      () => expect.unreachable('the call succeeded'),
      (e: grpc.ServiceError) => e,
    );
    expect(grpc.status[error.code]).toBe('PERMISSION_DENIED');
    expect(error.details).toBe(
      'the client certificate is not for other.tollgate.test (GRPC_CLIENT_TLS_SAN)',
    );
  });

  it('serves a replaced certificate to new connections, without a restart', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'tollgate-rotation-'));
    const cert = join(dir, 'tls.crt');
    const key = join(dir, 'tls.key');
    copyFileSync(certs.server.cert, cert);
    copyFileSync(certs.server.key, key);
    const refreshIntervalMs = 200;
    const reloadErrors: string[] = [];
    const port = await start(tlsEnv(cert, key), {
      refreshIntervalMs,
      onReloadError: (error) => reloadErrors.push(error.message),
    });
    const open = client(port, trusting());
    await callCheck(open, request);
    expect(await servedSerial(port)).toBe(certs.server.serialNumber);

    // Each file is replaced whole, by a rename, as a secret update does. Between the two, the new
    // key does not match the old certificate: that pair is refused and the old one still served.
    replace(key, certs.nextServer.key);
    await eventually(async () => reloadErrors.length > 0);
    expect(reloadErrors[0]).toMatch(
      /^GRPC_SERVER_TLS_CERT, GRPC_SERVER_TLS_KEY: not a certificate and its key .*; still serving the previous ones$/,
    );
    expect(await servedSerial(port)).toBe(certs.server.serialNumber);

    replace(cert, certs.nextServer.cert);
    const replaced = Date.now();
    await eventually(async () => (await servedSerial(port)) === certs.nextServer.serialNumber);
    expect(Date.now() - replaced).toBeLessThan(refreshIntervalMs + 1_000);

    // The connection opened before the rotation still works, and so does a new one.
    expect((await callCheck(open, request)).overall_code).toBe('OK');
    expect((await callCheck(client(port, trusting()), request)).overall_code).toBe('OK');
  });

  it('stops start-up on files that cannot serve, naming the setting', () => {
    const credentials = (env: Record<string, string>) => () =>
      createServerCredentials(readSettings(env).grpcServer.tls);
    expect(credentials(tlsEnv('/nonexistent/tls.crt'))).toThrow(
      /^GRPC_SERVER_TLS_CERT: cannot read '\/nonexistent\/tls.crt'/,
    );
    expect(credentials(tlsEnv(certs.server.cert, certs.nextServer.key))).toThrow(
      /^GRPC_SERVER_TLS_CERT, GRPC_SERVER_TLS_KEY: not a certificate and its key/,
    );
    expect(credentials({ ...tlsEnv(), GRPC_CLIENT_TLS_CACERT: certs.server.key })).toThrow(
      /^GRPC_CLIENT_TLS_CACERT: .* holds no certificate/,
    );
    expect(credentials({ ...tlsEnv(), GRPC_CLIENT_TLS_SAN: CLIENT_SAN })).toThrow(SettingsError);
  });
});

describe('server options', () => {
  /** An HTTP/2 session to a plaintext server started with these settings. */
  async function session(env: Record<string, string>): Promise<ClientHttp2Session> {
    const port = await start(env);
    const opened = connectHttp2(`http://127.0.0.1:${port}`);
    sessions.push(opened);
    opened.on('error', () => undefined);
    return opened;
  }
  const within = (ms: number, event: Promise<unknown>) =>
    Promise.race([
      event.then(() => true),
      new Promise<boolean>((resolve) => setTimeout(() => resolve(false), ms)),
    ]);

  it('announces GRPC_MAX_CONCURRENT_STREAMS, 100 by default, and no limit for 0', async () => {
    const settings = (s: ClientHttp2Session) =>
      new Promise<number | undefined>((resolve) =>
        s.once('remoteSettings', (remote) => resolve(remote.maxConcurrentStreams)),
      );
    expect(await settings(await session({ GRPC_MAX_CONCURRENT_STREAMS: '7' }))).toBe(7);
    expect(await settings(await session({}))).toBe(100);
    expect(await settings(await session({ GRPC_MAX_CONCURRENT_STREAMS: '0' }))).toBe(2 ** 32 - 1);
  });

  it('announces a header list of at most 16 KiB', async () => {
    const remote = await session({});
    const size = await new Promise<number | undefined>((resolve) =>
      remote.once('remoteSettings', (settings) => resolve(settings.maxHeaderListSize)),
    );
    expect(size).toBe(16 * 1024);
  });

  it('sends GOAWAY once a connection is GRPC_MAX_CONNECTION_AGE old', async () => {
    const started = Date.now();
    const aged = await session({ GRPC_MAX_CONNECTION_AGE: '300ms' });
    await new Promise((resolve) => aged.once('goaway', resolve));
    expect(Date.now() - started).toBeGreaterThanOrEqual(270); // the age, less 10% of jitter
    // Beyond Node's timer range (24.8 days) an age must not wrap around to "at once".
    const old = await session({ GRPC_MAX_CONNECTION_AGE: '1000h' });
    expect(await within(500, new Promise((resolve) => old.once('goaway', resolve)))).toBe(false);
  });

  it('pings an idle connection every GRPC_KEEPALIVE_TIME', async () => {
    const idle = await session({ GRPC_KEEPALIVE_TIME: '200ms' });
    expect(await within(2_000, new Promise((resolve) => idle.once('ping', resolve)))).toBe(true);
  });
});
