import type { ServerOptions } from '@grpc/grpc-js';
import type { GrpcServerSettings } from '../settings.js';

/**
 * The gRPC server's connection settings as grpc-js channel options. Envoy keeps its connections
 * to tollgate open for as long as it can, so without a maximum connection age the instances
 * started later (a scale-out, a rolling deploy) would receive no traffic: the age makes Envoy
 * reconnect now and then, and its load balancer then spreads the new connections.
 */

/** Node's timers fire at once past 2^31 − 1 ms (24.8 days); grpc-js reads that value as "never". */
const NEVER_MS = 2 ** 31 - 1;
/** grpc-js adds up to 10% of jitter to the connection age, and the sum must still fit a timer. */
const MAX_CONNECTION_AGE_MS = Math.floor(NEVER_MS / 1.1);

export function grpcServerOptions(settings: GrpcServerSettings): ServerOptions {
  return {
    'grpc.max_connection_age_ms': Math.min(settings.maxConnectionAgeMs, MAX_CONNECTION_AGE_MS),
    // How long calls in flight may finish after the GOAWAY before the connection is closed.
    'grpc.max_connection_age_grace_ms': Math.min(settings.maxConnectionAgeGraceMs, NEVER_MS),
    // Server-side pings find connections whose peer vanished without closing them.
    'grpc.keepalive_time_ms': Math.min(settings.keepaliveTimeMs, NEVER_MS),
    'grpc.keepalive_timeout_ms': Math.min(settings.keepaliveTimeoutMs, NEVER_MS),
    // 0 means no limit: the option is left out, since HTTP/2 has no value that says so.
    ...(settings.maxConcurrentStreams > 0
      ? { 'grpc.max_concurrent_streams': settings.maxConcurrentStreams }
      : {}),
  };
}
