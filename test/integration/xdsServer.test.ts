import { rmSync } from 'node:fs';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { makeCerts, type TestCerts } from '../support/certs.js';
import { buildXdsServer, startXdsServer, type XdsServer } from '../support/xdsServer.js';

// The xDS management server that the client tests push rules with (test/xds/server). Here only
// its command side: what a stream sees is for the tests of tollgate's xDS client.

const apiConfig = {
  name: 'api',
  domain: 'api',
  descriptors: [{ key: 'tenant', rate_limit: { unit: 'MINUTE', requests_per_unit: 5 } }],
};

let server: XdsServer;
let certs: TestCerts | undefined;

beforeAll(async () => {
  // The first build downloads go-control-plane and compiles it; later runs reuse the binary.
  buildXdsServer();
  server = await startXdsServer();
}, 300_000);

afterAll(async () => {
  await server?.stop();
  if (certs) rmSync(certs.dir, { recursive: true, force: true });
});

describe('xDS test server', () => {
  it('listens on the address it reports', async () => {
    expect(server.address).toBe(`127.0.0.1:${server.port}`);
    await expect(server.waitFor((event) => event.event === 'listening')).resolves.toEqual({
      event: 'listening',
      port: server.port,
    });
  });

  it('takes a snapshot of RateLimitConfigs for a node', async () => {
    await server.set('default', 'v1', [apiConfig]);
    expect(server.events).toContainEqual({ event: 'set', node: 'default', version: 'v1' });
  });

  it('refuses a config that is not a RateLimitConfig, with the reason', async () => {
    await expect(server.set('default', 'v2', [{ ...apiConfig, bogus: true }])).rejects.toThrow(
      /set failed: configs\[0\]: .*unknown field "bogus"/,
    );
    expect(server.events.at(-1)).toMatchObject({ event: 'error', op: 'set', version: 'v2' });
    // The server goes on taking commands.
    await server.set('default', 'v3', [apiConfig, { ...apiConfig, name: 'web', domain: 'web' }]);
  });

  it('clears a node', async () => {
    await server.clear('default');
    expect(server.events.at(-1)).toEqual({ event: 'cleared', node: 'default' });
  });

  it('starts with TLS and stops on SIGTERM', async () => {
    certs = makeCerts();
    const tls = await startXdsServer({
      tls: { certPath: certs.server.cert, keyPath: certs.server.key, clientCaPath: certs.ca },
    });
    await tls.set('default', 'v1', [apiConfig]);
    await tls.stop();
    expect(tls.child.exitCode).toBe(0);
  });
});
