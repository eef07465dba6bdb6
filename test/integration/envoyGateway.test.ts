import { spawn } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import * as grpc from '@grpc/grpc-js';
import { createRateLimitClient, type RateLimitClient } from '@tollgate/client';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { parse, parseAllDocuments } from 'yaml';
import {
  ENVOY_GATEWAY_BASE_ENV,
  ENVOY_GATEWAY_CERTS_DIR,
  ENVOY_GATEWAY_NODE_ID,
  ENVOY_GATEWAY_PROBE,
  ENVOY_GATEWAY_PROMETHEUS_ENV,
  ENVOY_GATEWAY_REDIS_ENV,
  makeEnvoyGatewayCerts,
  type EnvoyGatewayCerts,
} from '../support/envoyGateway.js';
import { freePort } from '../support/ports.js';
import { startRedis, type TestRedis } from '../support/redis.js';
import { callCheck, codes, d, eventually } from '../support/tollgate.js';
import {
  acked,
  isRequest,
  RATE_LIMIT_CONFIG_TYPE,
  startXdsServer,
  type XdsServer,
} from '../support/xdsServer.js';

// tollgate as Envoy Gateway v1.9.1 runs its rate-limit Deployment, configured as
// docs/envoy-gateway.md says: the environment Envoy Gateway gives the container for a Redis
// backend with Prometheus on (its default), the page's `container.env` merged over it as Envoy
// Gateway merges it, and the Secret envoy-rate-limit's files. Only what this machine cannot have
// differs, each said below: the certificates are in a temporary folder laid out as /certs is, the
// ports (fixed in the pod, 8080, 8081, 6070 and 19001) are free ones, and the xDS server and Redis
// are this test's. The xDS server is go-control-plane's, with Envoy Gateway's TLS: TLS 1.3 at
// least, client certificates required and verified against its CA.

/** The `env` of the page's EnvoyGateway configuration (in its ConfigMap), name by name. */
function documentedEnv(): { name: string; value: string }[] {
  const page = readFileSync('docs/envoy-gateway.md', 'utf8');
  for (const [, block] of page.matchAll(/^```yaml\n([^]*?)^```/gm)) {
    for (const doc of parseAllDocuments(block!)) {
      const value = doc.toJS() as { kind?: string; data?: Record<string, string> };
      if (value.kind !== 'ConfigMap' || !value.data?.['envoy-gateway.yaml']) continue;
      const config = parse(value.data['envoy-gateway.yaml']) as {
        provider: {
          kubernetes: {
            rateLimitDeployment: { container: { env: { name: string; value: string }[] } };
          };
        };
      };
      return config.provider.kubernetes.rateLimitDeployment.container.env;
    }
  }
  throw new Error('docs/envoy-gateway.md has no ConfigMap with envoy-gateway.yaml');
}

/**
 * Envoy Gateway's merge (resource.ExpectedContainerEnv): a user's variable replaces one of the
 * same name in place, and the others follow.
 */
function merged(
  base: Record<string, string>,
  user: { name: string; value: string }[],
): Record<string, string> {
  const out = { ...base };
  for (const { name, value } of user) out[name] = value;
  return out;
}

// The rules Envoy Gateway's translator makes of the page's BackendTrafficPolicy (one rule, a
// Distinct header) on the route `backend` of Gateway default/eg's listener `http`: one
// RateLimitConfig named by its domain, the listener; the route's descriptor, then the rule's.
const DOMAIN = 'default/eg/http';
const ROUTE = 'httproute/default/backend/rule/0/match/0/www_example_com';
const RULE_KEY = 'rule-0-match-0';
const TRANSLATED = {
  name: DOMAIN,
  domain: DOMAIN,
  descriptors: [
    {
      key: ROUTE,
      value: ROUTE,
      descriptors: [{ key: RULE_KEY, rate_limit: { unit: 'MINUTE', requests_per_unit: 3 } }],
    },
  ],
};

/** What Envoy sends for a request of this user on that route. */
const request = (user: string) => ({
  domain: DOMAIN,
  descriptors: [d(ROUTE, ROUTE, RULE_KEY, user)],
});

const sameSerial = (a: string, b: string) => BigInt(`0x${a}`) === BigInt(`0x${b}`);

/** The rate-limit container, running: its ports (free ones, in place of the pod's) and logs. */
interface Pod {
  ports: { grpc: number; http: number; debug: number; metrics: number };
  stdout(): string;
  stop(): Promise<void>;
}

/**
 * Starts tollgate on Envoy Gateway's environment for a Redis backend with Prometheus on (its
 * default), with `user` merged over it, and the files of the Secret envoy-rate-limit; resolves
 * once /healthcheck answers 200.
 */
async function startPod(
  certs: EnvoyGatewayCerts,
  addresses: { xds: string; redis: string },
  user: { name: string; value: string }[],
): Promise<Pod> {
  const ports = { grpc: 0, http: 0, debug: 0, metrics: 0 };
  for (const name of ['grpc', 'http', 'debug', 'metrics'] as const) ports[name] = await freePort();
  const env = merged(
    { ...ENVOY_GATEWAY_BASE_ENV, ...ENVOY_GATEWAY_REDIS_ENV, ...ENVOY_GATEWAY_PROMETHEUS_ENV },
    user,
  );
  // The pod's /certs is the Secret envoy-rate-limit: here, the same three files in a folder.
  for (const [name, value] of Object.entries(env)) {
    if (value.startsWith(`${ENVOY_GATEWAY_CERTS_DIR}/`)) {
      env[name] = join(certs.rateLimit.dir, value.slice(ENVOY_GATEWAY_CERTS_DIR.length + 1));
    }
  }
  Object.assign(env, {
    // `envoy-gateway` does not resolve here: the controller's certificate has `localhost` too.
    CONFIG_GRPC_XDS_SERVER_URL: addresses.xds,
    REDIS_URL: addresses.redis,
    // Free ports in place of the pod's; the same form, every interface, as Envoy Gateway's.
    PROMETHEUS_ADDR: `:${ports.metrics}`,
    GRPC_PORT: String(ports.grpc),
    PORT: String(ports.http),
    DEBUG_PORT: String(ports.debug),
  });
  const child = spawn(process.execPath, ['dist/main.js'], {
    env: { PATH: process.env.PATH ?? '', ...env },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let stdout = '';
  let stderr = '';
  child.stdout.on('data', (chunk: Buffer) => (stdout += chunk.toString()));
  child.stderr.on('data', (chunk: Buffer) => (stderr += chunk.toString()));
  const stop = async () => {
    if (child.exitCode !== null || child.signalCode !== null) return;
    const exited = new Promise((resolve) => child.once('exit', resolve));
    child.kill('SIGTERM');
    await exited;
  };
  try {
    await eventually(async () => {
      if (child.exitCode !== null) throw new Error(`tollgate exited: ${stderr}`);
      return (await fetch(`http://127.0.0.1:${ports.http}${ENVOY_GATEWAY_PROBE.path}`)).ok;
    }, 20_000);
  } catch (error) {
    await stop();
    throw new Error(`${String(error)}\n${stderr}\n${stdout}`);
  }
  return { ports, stdout: () => stdout, stop };
}

/**
 * A client of the gRPC port over TLS, trusting Envoy Gateway's CA and checking no name, as Envoy
 * Gateway configures Envoy; with the proxies' certificate (Secret envoy), or with none.
 */
function rateLimitClient(
  pod: Pod,
  certs: EnvoyGatewayCerts,
  certificate: boolean,
): RateLimitClient {
  const ca = readFileSync(certs.envoy.ca);
  const credentials = certificate
    ? grpc.credentials.createSsl(
        ca,
        readFileSync(certs.envoy.key),
        readFileSync(certs.envoy.cert),
        {
          checkServerIdentity: () => undefined,
        },
      )
    : grpc.credentials.createSsl(ca, null, null, { checkServerIdentity: () => undefined });
  return createRateLimitClient(`127.0.0.1:${pod.ports.grpc}`, credentials, {
    'grpc.ssl_target_name_override': 'envoy-ratelimit',
  });
}

describe("Envoy Gateway v1.9.1's rate-limit Deployment, as docs/envoy-gateway.md configures it", () => {
  let certs: EnvoyGatewayCerts;
  let redis: TestRedis;
  let xds: XdsServer;
  let pod: Pod;
  let envoy: RateLimitClient;

  beforeAll(async () => {
    certs = makeEnvoyGatewayCerts();
    redis = await startRedis();
    xds = await startXdsServer({
      tls: {
        certPath: certs.gateway.cert,
        keyPath: certs.gateway.key,
        clientCaPath: certs.gateway.ca,
        minVersion: '1.3',
      },
    });
    pod = await startPod(
      certs,
      { xds: `localhost:${xds.port}`, redis: `127.0.0.1:${redis.port}` },
      documentedEnv(),
    );
    envoy = rateLimitClient(pod, certs, true);
  }, 60_000);

  afterAll(async () => {
    envoy?.close();
    await pod?.stop();
    await xds?.stop();
    await redis?.stop();
  });

  const logs = () =>
    pod
      .stdout()
      .split('\n')
      .filter((line) => line.startsWith('{'))
      .map((line) => JSON.parse(line) as { level: number; msg: string });

  it('opens its xDS stream over TLS 1.3 with the certificate from /certs, as node envoy-ratelimit', async () => {
    const opened = await xds.waitFor((event) => event.event === 'stream-metadata', 15_000);
    expect(opened).toMatchObject({
      method: '/envoy.service.discovery.v3.AggregatedDiscoveryService/StreamAggregatedResources',
      tls: { version: 'TLS 1.3' },
    });
    const serial = opened.event === 'stream-metadata' ? (opened.tls?.clientSerial ?? '') : '';
    expect(serial).not.toBe('');
    expect(sameSerial(serial, certs.rateLimit.serialNumber)).toBe(true);
    const first = await xds.waitFor(isRequest);
    expect(first).toMatchObject({
      kind: 'initial',
      node: ENVOY_GATEWAY_NODE_ID,
      typeUrl: RATE_LIMIT_CONFIG_TYPE,
    });
  });

  it('is healthy before the first rules (FORCE_START_WITHOUT_INITIAL_CONFIG), and answers checks UNAVAILABLE', async () => {
    const health = await fetch(`http://127.0.0.1:${pod.ports.http}${ENVOY_GATEWAY_PROBE.path}`);
    expect([health.status, await health.text()]).toEqual([200, 'OK']);
    await expect(callCheck(envoy, request('alice'))).rejects.toMatchObject({
      code: grpc.status.UNAVAILABLE,
      details: expect.stringContaining('no rate limit configuration is loaded yet'),
    });
  });

  it('takes the rules Envoy Gateway serves, and answers Envoy over TLS by them', async () => {
    await xds.set(ENVOY_GATEWAY_NODE_ID, '1', [TRANSLATED]);
    await xds.waitFor(acked('1'));
    const answers = [];
    for (let i = 0; i < 4; i++) answers.push(codes(await callCheck(envoy, request('alice'))));
    expect(answers).toEqual([
      ['OK', 'OK'],
      ['OK', 'OK'],
      ['OK', 'OK'],
      ['OVER_LIMIT', 'OVER_LIMIT'],
    ]);
    expect(codes(await callCheck(envoy, request('bob')))).toEqual(['OK', 'OK']);
    const health = await fetch(`http://127.0.0.1:${pod.ports.http}${ENVOY_GATEWAY_PROBE.path}`);
    expect(health.status).toBe(200);
  });

  it('refuses a client without a certificate of the CA (GRPC_CLIENT_TLS_CACERT, from the page)', async () => {
    const stranger = rateLimitClient(pod, certs, false);
    try {
      await expect(callCheck(stranger, request('carol'), 3_000)).rejects.toMatchObject({
        code: grpc.status.UNAVAILABLE,
      });
    } finally {
      stranger.close();
    }
  });

  it('serves the metrics at /metrics on the PROMETHEUS_ADDR listener, named as the reference mapping names them', async () => {
    const scraped = await fetch(`http://127.0.0.1:${pod.ports.metrics}/metrics`);
    expect(scraped.status).toBe(200);
    const body = await scraped.text();
    const series = (name: string) =>
      new RegExp(`^${name}\\{[^}]*domain="${DOMAIN}"[^}]*\\} (\\d+)$`, 'm').exec(body)?.[1];
    expect(series('ratelimit_service_rate_limit_over_limit')).toBe('1');
    expect(series('ratelimit_service_rate_limit_within_limit')).toBe('4');
  });

  it('shows the rules in force on the debug port, where egctl config envoy-ratelimit reads them', async () => {
    const dump = await fetch(`http://127.0.0.1:${pod.ports.debug}/rlconfig`);
    expect(dump.status).toBe(200);
    expect(await dump.text()).toContain(DOMAIN);
  });

  it('started without a warning or an error', () => {
    expect(logs().filter((line) => line.level >= 40)).toEqual([]);
  });

  it('fails /healthcheck without Redis, while /metrics, the liveness probe of the page, answers', async () => {
    await redis.kill();
    await eventually(
      async () =>
        (await fetch(`http://127.0.0.1:${pod.ports.http}${ENVOY_GATEWAY_PROBE.path}`)).status ===
        500,
    );
    expect((await fetch(`http://127.0.0.1:${pod.ports.http}/metrics`)).status).toBe(200);
  });
});

// Envoy Gateway sets GRPC_SERVER_TLS_CA_CERT as if it asked for client certificates, but
// envoyproxy/ratelimit's name for that is GRPC_CLIENT_TLS_CACERT, and tollgate reads the same: on
// Envoy Gateway's variables alone, the gRPC port is TLS without client certificates.
describe("Envoy Gateway's environment alone", () => {
  let certs: EnvoyGatewayCerts;
  let redis: TestRedis;
  let pod: Pod;

  beforeAll(async () => {
    certs = makeEnvoyGatewayCerts();
    redis = await startRedis();
    // No xDS server answers: the check below needs none, with FORCE_START_WITHOUT_INITIAL_CONFIG.
    pod = await startPod(
      certs,
      { xds: `localhost:${await freePort()}`, redis: `127.0.0.1:${redis.port}` },
      [],
    );
  }, 60_000);

  afterAll(async () => {
    await pod?.stop();
    await redis?.stop();
  });

  it('admits a client without a certificate, as the reference does', async () => {
    const stranger = rateLimitClient(pod, certs, false);
    try {
      // Answered by the service, for want of rules: the call got through TLS.
      await expect(callCheck(stranger, request('carol'))).rejects.toMatchObject({
        code: grpc.status.UNAVAILABLE,
        details: expect.stringContaining('no rate limit configuration is loaded yet'),
      });
    } finally {
      stranger.close();
    }
  });
});
