import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import * as grpc from '@grpc/grpc-js';
import { service as healthService } from 'grpc-health-check';
import {
  createRateLimitClient,
  type RateLimitClient,
  type RateLimitRequestObject,
  type RateLimitResponseObject,
} from '@tollgate/client';
import { createService, type Service } from '../../src/process/service.js';
import { readSettings } from '../../src/process/settings.js';

/**
 * The real service, in this process, on a free port, with a real gRPC client. Tests pass the
 * rules as YAML text and may inject the clock (with CLOCK=local it is also Redis's clock).
 */
export interface Tollgate {
  address: string;
  /** The HTTP endpoints, e.g. `${httpUrl}/json`. */
  httpUrl: string;
  /** The rules file the service watches; edit it to reload. */
  rulesPath: string;
  client: RateLimitClient;
  clock: ManualClock;
  /** Calls ShouldRateLimit; resolves with the response, rejects with the gRPC error. */
  check(request: RateLimitRequestObject, deadlineMs?: number): Promise<RateLimitResponseObject>;
  stop(): Promise<void>;
}

export interface ManualClock {
  now: number;
  advance(ms: number): void;
}

/** A clock that moves only when told; starts at a window-aligned instant for readable tests. */
export function manualClock(start = Date.UTC(2030, 0, 1)): ManualClock {
  return {
    now: start,
    advance(ms: number) {
      this.now += ms;
    },
  };
}

export function writeRules(yaml: string): string {
  const dir = mkdtempSync(join(tmpdir(), 'tollgate-rules-'));
  const path = join(dir, 'rules.yaml');
  writeFileSync(path, yaml);
  return path;
}

export async function startTollgate(options: {
  rules: string;
  env?: Record<string, string>;
  redisUrl?: string;
  clock?: ManualClock;
  /** The test client's credentials; insecure by default. */
  clientCredentials?: grpc.ChannelCredentials;
  /**
   * How often the store's health probe runs (see Store.probe). Tests that count Redis's script
   * calls make it rare, so that only the probe at start-up runs.
   */
  healthIntervalMs?: number;
}): Promise<Tollgate> {
  const clock = options.clock ?? manualClock();
  const rulesPath = writeRules(options.rules);
  const settings = readSettings({
    CONFIG_PATH: rulesPath,
    GRPC_HOST: '127.0.0.1',
    GRPC_PORT: '0',
    HOST: '127.0.0.1',
    PORT: '0',
    LOG_LEVEL: 'silent',
    CLOCK: 'local',
    REDIS_TIMEOUT: '1s',
    ...(options.redisUrl ? { REDIS_URL: options.redisUrl } : {}),
    ...options.env,
  });
  const service: Service = createService({
    settings,
    clock: () => clock.now,
    env: options.env ?? {},
    healthIntervalMs: options.healthIntervalMs,
  });
  const { grpcPort, httpPort } = await service.start();
  const address = `127.0.0.1:${grpcPort}`;
  const client = createRateLimitClient(address, options.clientCredentials);
  return {
    address,
    httpUrl: `http://127.0.0.1:${httpPort}`,
    rulesPath,
    client,
    clock,
    check: (request, deadlineMs = 5_000) => callCheck(client, request, deadlineMs),
    async stop() {
      client.close();
      await service.stop(1_000);
    },
  };
}

export function callCheck(
  client: RateLimitClient,
  request: RateLimitRequestObject,
  deadlineMs = 5_000,
): Promise<RateLimitResponseObject> {
  return new Promise((resolve, reject) => {
    client.ShouldRateLimit(
      request,
      new grpc.Metadata(),
      { deadline: Date.now() + deadlineMs },
      (error, response) => (error ? reject(error) : resolve(response as RateLimitResponseObject)),
    );
  });
}

type Descriptor = NonNullable<RateLimitRequestObject['descriptors']>[number];

/** A descriptor from alternating keys and values: `d('tenant', 'acme', 'route', '/orders')`. */
export function d(...keysAndValues: string[]): Descriptor {
  const entries = [];
  for (let i = 0; i < keysAndValues.length; i += 2) {
    entries.push({ key: keysAndValues[i], value: keysAndValues[i + 1] ?? '' });
  }
  return { entries };
}

/** The codes of a response, overall first: e.g. ['OVER_LIMIT', 'OK', 'OVER_LIMIT']. */
export function codes(response: RateLimitResponseObject): string[] {
  return [response.overall_code ?? '', ...(response.statuses ?? []).map((s) => s.code ?? '')];
}

/** duration_until_reset in milliseconds, or undefined when absent. */
export function resetMs(
  status: NonNullable<RateLimitResponseObject['statuses']>[number],
): number | undefined {
  const d = status.duration_until_reset;
  if (!d) return undefined;
  return Number(d.seconds ?? 0) * 1000 + Math.round((d.nanos ?? 0) / 1e6);
}

/** grpc.health.v1 Check of the overall service "", e.g. 'SERVING' or 'NOT_SERVING'. */
export function healthStatus(address: string): Promise<string> {
  const Health = grpc.makeGenericClientConstructor(
    healthService as grpc.ServiceDefinition,
    'Health',
  );
  const health = new Health(
    address,
    grpc.credentials.createInsecure(),
  ) as unknown as grpc.Client & {
    Check: (...args: unknown[]) => void;
  };
  return new Promise<string>((resolve, reject) =>
    health.Check(
      { service: '' },
      { deadline: Date.now() + 5_000 },
      (error: Error | null, reply: { status: string }) => {
        health.close();
        if (error) reject(error);
        else resolve(reply.status);
      },
    ),
  );
}

/** Whether a Redis key is the health probe's counter, which every running service writes. */
export const isProbeKey = (key: string): boolean => /(^|:)tg:\{probe/.test(key);

/** Polls until `probe` resolves true, or fails after timeoutMs. */
export async function eventually(probe: () => Promise<boolean>, timeoutMs = 10_000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!(await probe().catch(() => false))) {
    if (Date.now() > deadline) throw new Error(`condition not met within ${timeoutMs} ms`);
    await new Promise((resolve) => setTimeout(resolve, 50));
  }
}
