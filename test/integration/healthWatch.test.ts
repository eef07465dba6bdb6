import * as grpc from '@grpc/grpc-js';
import { service as healthService } from 'grpc-health-check';
import { afterAll, describe, expect, it } from 'vitest';
import { addHealth } from '../../src/servers/grpc/health.js';
import { counterByLabel } from '../support/metrics.js';
import { spawnTollgate, type TollgateProcess } from '../support/processes.js';

// grpc.health.v1's Watch is a server stream that a client with client-side health checking keeps
// open for as long as its connection: the call timeout must not end it (a client would see its
// health drop every GRPC_CALL_TIMEOUT), yet it is bounded: in number, and by shutdown.

const RULES = `
domain: watch
descriptors:
  - key: tenant
    rate_limit: {unit: hour, requests_per_unit: 10}
`;

const Health = grpc.makeGenericClientConstructor(healthService as grpc.ServiceDefinition, 'Health');
type HealthClient = grpc.Client & {
  Watch(request: { service: string }): grpc.ClientReadableStream<{ status: string }>;
};

interface Watching {
  statuses: string[];
  /** The status the stream ended with, and when (performance.now()); undefined while open. */
  ended: { code: number; details: string; atMs: number } | undefined;
  done: Promise<void>;
  cancel(): void;
}

function watch(client: HealthClient, service = ''): Watching {
  const call = client.Watch({ service });
  const watching: Watching = {
    statuses: [],
    ended: undefined,
    done: Promise.resolve(),
    cancel: () => call.cancel(),
  };
  call.on('data', (reply: { status: string }) => watching.statuses.push(reply.status));
  watching.done = new Promise((resolve) => {
    call.on('status', (status: grpc.StatusObject) => {
      watching.ended = { code: status.code, details: status.details, atMs: performance.now() };
      resolve();
    });
  });
  call.on('error', () => undefined);
  return watching;
}

const running: TollgateProcess[] = [];
const clients: grpc.Client[] = [];
afterAll(async () => {
  for (const client of clients) client.close();
  await Promise.all(running.map((t) => t.stop()));
});

describe('health Watch', () => {
  it('outlives GRPC_CALL_TIMEOUT, then ends NOT_SERVING at shutdown, without holding the exit', async () => {
    const tollgate = await spawnTollgate(RULES, {
      GRPC_CALL_TIMEOUT: '1s',
      GRPC_MAX_CONNECTION_IDLE: '1s',
      SHUTDOWN_GRACE: '20s',
    });
    running.push(tollgate);
    const client = new Health(
      tollgate.address,
      grpc.credentials.createInsecure(),
    ) as unknown as HealthClient;
    clients.push(client);
    const watching = watch(client);
    await new Promise((resolve) => setTimeout(resolve, 3_500));
    // Neither the call timeout (1 s) nor the idle bound (1 s) ended it.
    expect(watching.ended).toBeUndefined();
    expect(watching.statuses).toEqual(['SERVING']);
    const bounds = await counterByLabel(tollgate.httpUrl, 'tollgate_bounds_reached_total', 'bound');
    expect(bounds.grpc_call_timeout).toBe(0);

    const stopping = performance.now();
    const exit = await tollgate.stop();
    await watching.done;
    console.log(
      `[health watch] statuses ${watching.statuses.join(' → ')}; ended ${grpc.status[watching.ended!.code]} ` +
        `${(watching.ended!.atMs - stopping).toFixed(0)} ms after SIGTERM; exit ${exit} after ${(performance.now() - stopping).toFixed(0)} ms`,
    );
    expect(watching.statuses).toEqual(['SERVING', 'NOT_SERVING']);
    expect(watching.ended!.code).toBe(grpc.status.OK);
    expect(exit).toBe(0);
    // Well within SHUTDOWN_GRACE (20 s): the drain did not wait for the Watch.
    expect(performance.now() - stopping).toBeLessThan(8_000);
  }, 30_000);

  it('is refused with RESOURCE_EXHAUSTED past its bound; a closed one frees its place', async () => {
    const server = new grpc.Server();
    let refused = 0;
    const health = addHealth(server, {
      names: [''],
      maxWatches: 2,
      onBound: () => (refused += 1),
    });
    const port = await new Promise<number>((resolve, reject) =>
      server.bindAsync('127.0.0.1:0', grpc.ServerCredentials.createInsecure(), (e, p) =>
        e ? reject(e) : resolve(p),
      ),
    );
    const client = new Health(
      `127.0.0.1:${port}`,
      grpc.credentials.createInsecure(),
    ) as unknown as HealthClient;
    clients.push(client);
    try {
      const first = watch(client);
      const second = watch(client, 'unknown.Service');
      const waitFor = async (condition: () => boolean) => {
        for (let i = 0; i < 200 && !condition(); i++) await new Promise((r) => setTimeout(r, 25));
      };
      await waitFor(() => first.statuses.length > 0 && second.statuses.length > 0);
      expect([first.statuses, second.statuses]).toEqual([['SERVING'], ['SERVICE_UNKNOWN']]);
      const third = watch(client);
      await third.done;
      expect(third.ended).toMatchObject({ code: grpc.status.RESOURCE_EXHAUSTED });
      expect(third.ended!.details).toMatch(/2 Watch streams are open/);
      expect(refused).toBe(1);

      // The watchers of known names hear of changes; one that closes frees its place.
      health.setServing(false);
      await waitFor(() => first.statuses.length > 1);
      expect(first.statuses).toEqual(['SERVING', 'NOT_SERVING']);
      expect(second.statuses).toEqual(['SERVICE_UNKNOWN']);
      first.cancel();
      await first.done;
      // The server hears of the cancel a moment after the client.
      let fourth = watch(client);
      await waitFor(() => fourth.statuses.length > 0 || fourth.ended !== undefined);
      for (let i = 0; i < 20 && fourth.ended?.code === grpc.status.RESOURCE_EXHAUSTED; i++) {
        await new Promise((r) => setTimeout(r, 100));
        fourth = watch(client);
        await waitFor(() => fourth.statuses.length > 0 || fourth.ended !== undefined);
      }
      expect(fourth.statuses).toEqual(['NOT_SERVING']);
      expect(fourth.ended).toBeUndefined();
      health.endWatches();
      await Promise.all([second.done, fourth.done]);
      expect([second.ended!.code, fourth.ended!.code]).toEqual([grpc.status.OK, grpc.status.OK]);
    } finally {
      server.forceShutdown();
    }
  });
});
