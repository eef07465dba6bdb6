import { spawn, type ChildProcess } from 'node:child_process';
import { existsSync, mkdirSync, mkdtempSync, renameSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createRateLimitClient, type RateLimitClient } from '@tollgate/client';
import { freePort } from '../support/ports.js';
import { eventually, healthStatus } from '../support/tollgate.js';

/**
 * envoyproxy/ratelimit's own server, built from the Go module by scripts/reference.sh, run as a
 * process beside tollgate: the oracle of the differential tests.
 */
export const REFERENCE_BIN =
  process.env.TOLLGATE_REFERENCE_BIN ?? join('.cache', 'reference', 'service_cmd');

export interface ReferenceProcess {
  address: string;
  /** Its Prometheus endpoint (USE_PROMETHEUS=true). */
  metricsUrl: string;
  client: RateLimitClient;
  /** Writes one rules file (by name) into its directory, as an operator's deploy would. */
  writeRules(name: string, yaml: string): void;
  stderr(): string;
  stop(): Promise<void>;
}

export async function startReference(
  rules: Readonly<Record<string, string>>,
  redisUrl: string,
  env: Record<string, string> = {},
  binary = REFERENCE_BIN,
): Promise<ReferenceProcess> {
  if (!existsSync(binary)) {
    throw new Error(
      `the reference server is not built at ${binary}: run scripts/reference.sh first`,
    );
  }
  const layout = referenceLayout(rules);
  const { env: serverEnv, grpcPort, prometheusPort } = await referenceEnv(layout.root, redisUrl);
  const child: ChildProcess = spawn(binary, [], {
    env: {
      PATH: process.env.PATH,
      ...serverEnv,
      // Its statistics reach Prometheus only when flushed.
      STATS_FLUSH_INTERVAL: '100ms',
      ...env,
    },
    stdio: ['ignore', 'ignore', 'pipe'],
  });
  let stderr = '';
  child.stderr?.on('data', (chunk: Buffer) => {
    if (stderr.length < 100_000) stderr += chunk.toString();
  });
  const address = `127.0.0.1:${grpcPort}`;
  const exited = () => child.exitCode !== null || child.signalCode !== null;
  await eventually(async () => exited() || (await healthStatus(address)) === 'SERVING', 30_000);
  if (exited()) throw new Error(`the reference server exited at start-up: ${stderr}`);
  const client = createRateLimitClient(address);
  return {
    address,
    metricsUrl: `http://127.0.0.1:${prometheusPort}/metrics`,
    client,
    writeRules: layout.writeRules,
    stderr: () => stderr,
    stop: () =>
      new Promise((resolve) => {
        client.close();
        if (exited()) return resolve();
        child.once('exit', () => resolve());
        child.kill('SIGTERM');
      }),
  };
}

/** The reference's RUNTIME_ROOT layout in a new directory, holding these rules files. */
export function referenceLayout(rules: Readonly<Record<string, string>>): {
  root: string;
  writeRules(name: string, yaml: string): void;
} {
  const root = mkdtempSync(join(tmpdir(), 'tollgate-reference-'));
  const configDir = join(root, 'ratelimit', 'config');
  mkdirSync(configDir, { recursive: true });
  const writeRules = (name: string, yaml: string) => {
    // Written whole, then renamed, so that its watcher never reads half a file.
    const staged = join(root, 'staged.yaml');
    writeFileSync(staged, yaml);
    renameSync(staged, join(configDir, name));
  };
  for (const [name, yaml] of Object.entries(rules)) writeRules(name, yaml);
  return { root, writeRules };
}

/**
 * What the reference needs to run beside others on 127.0.0.1: the layout, Redis over TCP at
 * `host:port`, statsd off (fatal in this build when it is on) and Prometheus on, and a free port
 * for everything it listens on.
 */
export async function referenceEnv(
  root: string,
  redisHostPort: string,
): Promise<{ env: Record<string, string>; grpcPort: number; prometheusPort: number }> {
  const [grpcPort, port, debugPort, prometheusPort] = await Promise.all([
    freePort(),
    freePort(),
    freePort(),
    freePort(),
  ]);
  const env = {
    RUNTIME_ROOT: root,
    RUNTIME_SUBDIRECTORY: 'ratelimit',
    RUNTIME_WATCH_ROOT: 'false',
    REDIS_SOCKET_TYPE: 'tcp',
    REDIS_URL: redisHostPort,
    USE_STATSD: 'false',
    USE_PROMETHEUS: 'true',
    PROMETHEUS_ADDR: `127.0.0.1:${prometheusPort}`,
    GRPC_HOST: '127.0.0.1',
    GRPC_PORT: String(grpcPort),
    HOST: '127.0.0.1',
    PORT: String(port),
    DEBUG_HOST: '127.0.0.1',
    DEBUG_PORT: String(debugPort),
    LOG_LEVEL: 'warn',
  };
  return { env, grpcPort, prometheusPort };
}
