/**
 * grpc.health.v1: Check, List and Watch for a fixed set of service names.
 *
 * Watch is a server stream that a client with client-side health checking (grpc-go's and
 * grpc-java's `healthCheckConfig`) keeps open for as long as its connection lives, so the call
 * timeout does not end it (server.ts has the guard hold it, as RLQS streams). It is bounded
 * otherwise: at most `maxWatches` open at once (past it, RESOURCE_EXHAUSTED), each counted as an
 * open call on its connection, ended by the connection's age, and, at shutdown, sent NOT_SERVING
 * and then ended (`endWatches`), so that a drain does not wait for them. grpc-health-check's own
 * implementation would keep every Watch without a bound, and one entry for every service name
 * ever watched.
 */
import * as grpc from '@grpc/grpc-js';
import { service as healthService } from 'grpc-health-check';

export const HEALTH_WATCH_PATH = '/grpc.health.v1.Health/Watch';

type Status = 'SERVING' | 'NOT_SERVING' | 'SERVICE_UNKNOWN';
interface HealthRequest {
  service: string;
}
interface HealthResponse {
  status: Status;
}
type WatchCall = grpc.ServerWritableStream<HealthRequest, HealthResponse>;

export interface HealthOptions {
  /** The names health answers for; any other is unknown. */
  names: readonly string[];
  /** Watch streams open at once. */
  maxWatches: number;
  /** Told of each Watch refused past `maxWatches`. */
  onBound?(): void;
}

export interface Health {
  /** Flips every name between SERVING and NOT_SERVING, and tells the watchers. */
  setServing(serving: boolean): void;
  /** Ends every Watch, after its last status, and each one opened from now on at once. */
  endWatches(): void;
}

/** Serves grpc.health.v1 on the server, SERVING from the start. */
export function addHealth(server: grpc.Server, options: HealthOptions): Health {
  const statuses = new Map<string, Status>(options.names.map((name) => [name, 'SERVING']));
  const watches = new Set<WatchCall>();
  let ended = false;
  const statusOf = (name: string): Status => statuses.get(name) ?? 'SERVICE_UNKNOWN';

  const watch = (call: WatchCall) => {
    if (watches.size >= options.maxWatches) {
      options.onBound?.();
      call.emit('error', {
        code: grpc.status.RESOURCE_EXHAUSTED,
        details: `health: ${options.maxWatches} Watch streams are open, the most at once`,
      });
      return;
    }
    call.write({ status: statusOf(call.request.service) });
    if (ended) return void call.end();
    watches.add(call);
    call.once('cancelled', () => watches.delete(call));
    call.once('close', () => watches.delete(call));
  };
  server.addService(
    healthService as unknown as grpc.ServiceDefinition,
    {
      check: (
        call: grpc.ServerUnaryCall<HealthRequest, HealthResponse>,
        callback: grpc.sendUnaryData<HealthResponse>,
      ) => {
        const status = statuses.get(call.request.service);
        if (status) return callback(null, { status });
        callback({ code: grpc.status.NOT_FOUND, details: 'health status unknown for the service' });
      },
      list: (_call: unknown, callback: grpc.sendUnaryData<unknown>) =>
        callback(null, {
          statuses: Object.fromEntries([...statuses].map(([name, status]) => [name, { status }])),
        }),
      watch,
    } as grpc.UntypedServiceImplementation,
  );

  return {
    setServing(serving) {
      const status: Status = serving ? 'SERVING' : 'NOT_SERVING';
      // Watchers are told of changes only.
      if (statuses.values().next().value === status) return;
      for (const name of statuses.keys()) statuses.set(name, status);
      for (const call of watches) {
        if (statuses.has(call.request.service)) call.write({ status });
      }
    },
    endWatches() {
      ended = true;
      for (const call of watches) call.end();
      watches.clear();
    },
  };
}
