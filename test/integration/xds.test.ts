import { afterEach, beforeAll, describe, expect, it } from 'vitest';
import { makeCerts } from '../support/certs.js';
import { counterByLabel } from '../support/metrics.js';
import { freePort } from '../support/ports.js';
import {
  eventually,
  healthStatus,
  manualClock,
  startTollgate,
  type Tollgate,
} from '../support/tollgate.js';
import {
  acked,
  buildXdsServer,
  isRequest,
  startXdsServer,
  xdsEnv as baseXdsEnv,
  type XdsRequestEvent,
  type XdsServer,
} from '../support/xdsServer.js';

// tollgate's xDS client against a real management server: go-control-plane's state-of-the-world
// server and snapshot cache (test/xds/server), over ADS, as Envoy Gateway runs it.

const NODE = 'tollgate-test';

/** One domain, `api`, limiting each tenant to `perMinute`. */
function config(perMinute: number, name = 'api', key = 'tenant') {
  return {
    name,
    domain: 'api',
    descriptors: [{ key, rate_limit: { unit: 'MINUTE', requests_per_unit: perMinute } }],
  };
}

const request = (tenant: string) => ({
  domain: 'api',
  descriptors: [{ entries: [{ key: 'tenant', value: tenant }] }],
});

function xdsEnv(server: { address: string }, extra: Record<string, string> = {}) {
  return baseXdsEnv(server, NODE, extra);
}

async function rlconfig(tollgate: Tollgate): Promise<string> {
  return (await fetch(`${tollgate.httpUrl}/rlconfig`)).text();
}

describe('rules over xDS, from a go-control-plane management server', () => {
  const cleanup: (() => Promise<void>)[] = [];
  beforeAll(() => {
    buildXdsServer();
  }, 600_000);
  afterEach(async () => {
    for (const step of cleanup.splice(0).reverse()) await step();
  });

  async function serve(port?: number): Promise<XdsServer> {
    const server = await startXdsServer(port === undefined ? {} : { port });
    cleanup.push(() => server.stop());
    return server;
  }

  const startTollgateFor = (server: XdsServer) => tollgate(xdsEnv(server));

  async function tollgate(env: Record<string, string>): Promise<Tollgate> {
    const started = await startTollgate({ rules: 'domain: unused\n', clock: manualClock(), env });
    cleanup.push(() => started.stop());
    return started;
  }

  it('sends its node, applies each version and ACKs it; a lower limit keeps the count', async () => {
    const server = await serve();
    await server.set(NODE, 'v1', [config(5)]);
    const service = await tollgate(
      xdsEnv(server, {
        CONFIG_GRPC_XDS_NODE_METADATA: 'cluster=edge,zone=a',
        CONFIG_GRPC_XDS_CLIENT_ADDITIONAL_HEADERS: 'x-tenant-token=abc',
      }),
    );
    const first = (await server.waitFor(
      (e) => isRequest(e) && e.kind === 'initial',
    )) as XdsRequestEvent;
    expect(first.node).toBe(NODE);
    expect(first.nodeMetadata).toEqual({ cluster: 'edge', zone: 'a' });
    expect(first.resourceNames).toEqual([]);
    const headers = await server.waitFor((e) => e.event === 'stream-metadata');
    expect(headers.event === 'stream-metadata' && headers.metadata['x-tenant-token']).toEqual([
      'abc',
    ]);
    await server.waitFor(acked('v1'));

    for (const remaining of [4, 3]) {
      const answer = await service.check(request('acme'));
      expect(answer.overall_code).toBe('OK');
      expect(answer.statuses?.[0]?.limit_remaining).toBe(remaining);
    }
    expect(await rlconfig(service)).toMatch(
      new RegExp(`^# source: xds ${server.address}, version 'v1'\n`),
    );

    const pushed = performance.now();
    await server.set(NODE, 'v2', [config(3)]);
    await server.waitFor(acked('v2'));
    // What an operator waits for an update: from the server's snapshot to tollgate's ACK.
    console.log(
      `[xds] v2 applied and ACKed ${Math.round(performance.now() - pushed)} ms after it was set`,
    );
    expect(await rlconfig(service)).toContain("version 'v2'");
    // Two of three are spent already: one more, then over.
    expect((await service.check(request('acme'))).statuses?.[0]?.limit_remaining).toBe(0);
    expect((await service.check(request('acme'))).overall_code).toBe('OVER_LIMIT');
    // Another window is another counter: the count starts again.
    await server.set(NODE, 'v3', [
      {
        name: 'api',
        domain: 'api',
        descriptors: [{ key: 'tenant', rate_limit: { unit: 'HOUR', requests_per_unit: 3 } }],
      },
    ]);
    await server.waitFor(acked('v3'));
    expect((await service.check(request('acme'))).statuses?.[0]?.limit_remaining).toBe(2);
    const metrics = await (await fetch(`${service.httpUrl}/metrics`)).text();
    expect(metrics).toContain('tollgate_rules_info{source="xds",version="v3"} 1');
    expect(metrics).not.toContain('version="v2"');
  }, 60_000);

  it('NACKs a version it refuses, with the reason, and the previous rules keep serving', async () => {
    const server = await serve();
    await server.set(NODE, 'v1', [config(2)]);
    const service = await tollgate(xdsEnv(server));
    await server.waitFor(acked('v1'));

    await server.set(NODE, 'v2', [
      {
        name: 'api',
        domain: 'api',
        descriptors: [{ key: 'tenant', rate_limit: { requests_per_unit: 5 } }],
      },
    ]);
    const nack = (await server.waitFor(
      (e) => isRequest(e) && e.kind === 'nack',
    )) as XdsRequestEvent;
    expect(nack.versionInfo).toBe('v1');
    expect(nack.errorDetail?.code).toBe(3);
    expect(nack.errorDetail?.message).toMatch(
      /^RateLimitConfig 'api': descriptors\[0\]\.rate_limit\.unit: 'unknown' is not one of/,
    );
    expect(await rlconfig(service)).toContain("version 'v1'");
    expect(
      (await service.check(request('acme'))).statuses?.[0]?.current_limit?.requests_per_unit,
    ).toBe(2);
    // The server sends the refused version again after each NACK: it is not loaded again, and
    // the NACKs come about once a second rather than as fast as the two can talk.
    const before = server.events.filter((e) => isRequest(e) && e.kind === 'nack').length;
    await new Promise((resolve) => setTimeout(resolve, 2_500));
    const nacks = server.events.filter((e) => isRequest(e) && e.kind === 'nack').length - before;
    expect(nacks).toBeGreaterThanOrEqual(1);
    expect(nacks).toBeLessThanOrEqual(4);

    // The next good version applies.
    await server.set(NODE, 'v3', [config(7)]);
    await server.waitFor(acked('v3'));
    expect(
      (await service.check(request('acme'))).statuses?.[0]?.current_limit?.requests_per_unit,
    ).toBe(7);
  }, 60_000);

  it('loads each refused content once, even when the server alternates between several', async () => {
    const server = await serve();
    await server.set(NODE, 'v1', [config(2)]);
    const service = await tollgate(xdsEnv(server));
    await server.waitFor(acked('v1'));
    // No unit: refused. Two contents, by their limits.
    const broken = (limit: number) => [
      {
        name: 'api',
        domain: 'api',
        descriptors: [{ key: 'tenant', rate_limit: { requests_per_unit: limit } }],
      },
    ];
    const nacks = () => server.events.filter((e) => isRequest(e) && e.kind === 'nack').length;
    // Two refused contents, alternated: A, B, A, B, A, B.
    for (let i = 0; i < 6; i++) {
      const before = nacks();
      await server.set(NODE, `bad-${i}`, broken(i % 2 === 0 ? 5 : 6));
      await eventually(async () => nacks() > before);
    }
    const errors = await counterByLabel(service.httpUrl, 'tollgate_config_loads_total', 'result');
    expect(errors.error).toBe(2); // loaded once each; the repeats were refused from memory
    expect(await rlconfig(service)).toContain("version 'v1'");
  }, 60_000);

  it('speaks TLS to a server that requires a client certificate', async () => {
    const certs = makeCerts();
    const server = await startXdsServer({
      tls: { certPath: certs.server.cert, keyPath: certs.server.key, clientCaPath: certs.ca },
    });
    cleanup.push(() => server.stop());
    await server.set(NODE, 'v1', [config(6)]);
    const tls = {
      CONFIG_GRPC_XDS_SERVER_USE_TLS: 'true',
      CONFIG_GRPC_XDS_SERVER_TLS_CACERT: certs.ca,
      CONFIG_GRPC_XDS_CLIENT_TLS_CERT: certs.client.cert,
      CONFIG_GRPC_XDS_CLIENT_TLS_KEY: certs.client.key,
      CONFIG_GRPC_XDS_SERVER_TLS_SAN: 'localhost',
    };
    const service = await tollgate(xdsEnv(server, tls));
    await server.waitFor(acked('v1'));
    expect((await service.check(request('acme'))).statuses?.[0]?.limit_remaining).toBe(5);

    // Without its certificate, the server refuses the handshake: no rules, so UNAVAILABLE.
    const anonymous = await tollgate(
      xdsEnv(server, {
        CONFIG_GRPC_XDS_SERVER_USE_TLS: 'true',
        CONFIG_GRPC_XDS_SERVER_TLS_CACERT: certs.ca,
        FORCE_START_WITHOUT_INITIAL_CONFIG: 'true',
      }),
    );
    await new Promise((resolve) => setTimeout(resolve, 1_000));
    await expect(anonymous.check(request('acme'))).rejects.toMatchObject({ code: 14 });
    const initials = server.events.filter((e) => isRequest(e) && e.kind === 'initial');
    expect(initials).toHaveLength(1);
  }, 60_000);

  it('refuses one domain in two resources unless MERGE_DOMAIN_CONFIG merges them', async () => {
    const server = await serve();
    const two = [config(5, 'api-tenants', 'tenant'), config(9, 'api-ips', 'ip')];
    await server.set(NODE, 'v1', [config(1)]);
    await tollgate(xdsEnv(server));
    await server.waitFor(acked('v1'));
    await server.set(NODE, 'v2', two);
    const nack = (await server.waitFor(
      (e) => isRequest(e) && e.kind === 'nack',
    )) as XdsRequestEvent;
    expect(nack.errorDetail?.message).toMatch(
      /domain: 'api' is already defined in RateLimitConfig/,
    );

    // Two domains in two resources: both apply.
    await server.set(NODE, 'v3', [config(4, 'api'), { ...config(6, 'web'), domain: 'web' }]);
    await server.waitFor(acked('v3'));
    const both = await startTollgateFor(server);
    expect(
      (await both.check(request('acme'))).statuses?.[0]?.current_limit?.requests_per_unit,
    ).toBe(4);
    expect(
      (await both.check({ ...request('acme'), domain: 'web' })).statuses?.[0]?.current_limit
        ?.requests_per_unit,
    ).toBe(6);

    const merging = await serve();
    await merging.set(NODE, 'm1', two);
    const service = await tollgate(xdsEnv(merging, { MERGE_DOMAIN_CONFIG: 'true' }));
    await merging.waitFor(acked('m1'));
    const answer = await service.check({
      domain: 'api',
      descriptors: [
        { entries: [{ key: 'tenant', value: 'acme' }] },
        { entries: [{ key: 'ip', value: '10.0.0.1' }] },
      ],
    });
    expect(answer.statuses?.map((s) => s.current_limit?.requests_per_unit)).toEqual([5, 9]);
  }, 60_000);

  it('keeps deciding with the last rules while the server is gone, and reconnects', async () => {
    const port = await freePort();
    const server = await startXdsServer({ port });
    await server.set(NODE, 'v1', [config(100)]);
    const service = await tollgate(xdsEnv(server));
    await server.waitFor(acked('v1'));
    await server.kill();

    for (let i = 0; i < 5; i += 1) {
      expect((await service.check(request('acme'))).overall_code).toBe('OK');
    }
    expect(await healthStatus(service.address)).toBe('SERVING');

    const again = await serve(port);
    await again.set(NODE, 'v2', [config(50)]);
    await again.waitFor(acked('v2'), 15_000);
    expect(
      (await service.check(request('acme'))).statuses?.[0]?.current_limit?.requests_per_unit,
    ).toBe(50);
  }, 60_000);

  it('waits for its first rules before serving, unless FORCE_START_WITHOUT_INITIAL_CONFIG', async () => {
    const port = await freePort();
    const address = `127.0.0.1:${port}`;
    let served = false;
    const waiting = tollgate(xdsEnv({ address })).then((started) => {
      served = true;
      return started;
    });
    await new Promise((resolve) => setTimeout(resolve, 1_000));
    expect(served).toBe(false);
    const server = await serve(port);
    await server.set(NODE, 'v1', [config(4)]);
    const service = await waiting;
    expect((await service.check(request('acme'))).statuses?.[0]?.limit_remaining).toBe(3);
  }, 60_000);

  it('with FORCE_START_WITHOUT_INITIAL_CONFIG, answers UNAVAILABLE until rules arrive', async () => {
    const port = await freePort();
    const address = `127.0.0.1:${port}`;
    const service = await tollgate(
      xdsEnv({ address }, { FORCE_START_WITHOUT_INITIAL_CONFIG: 'true' }),
    );
    await expect(service.check(request('acme'))).rejects.toMatchObject({
      code: 14,
      details: expect.stringMatching(/no rate limit configuration is loaded yet/),
    });
    expect(await healthStatus(service.address)).toBe('SERVING');
    const strict = await tollgate(
      xdsEnv(
        { address },
        {
          FORCE_START_WITHOUT_INITIAL_CONFIG: 'true',
          HEALTHY_WITH_AT_LEAST_ONE_CONFIG_LOADED: 'true',
        },
      ),
    );
    expect(await healthStatus(strict.address)).toBe('NOT_SERVING');

    const server = await serve(port);
    await server.set(NODE, 'v1', [config(4)]);
    await eventually(async () => (await healthStatus(strict.address)) === 'SERVING', 15_000);
    // Each service reconnects to the management server on its own backoff: the first may get
    // the rules a moment after the second.
    await eventually(
      async () => (await service.check(request('acme'))).overall_code === 'OK',
      15_000,
    );
  }, 60_000);
});
