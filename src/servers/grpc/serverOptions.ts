import type { ServerOptions } from '@grpc/grpc-js';
import type { GrpcServerSettings } from './serverSettings.js';

import type { GuardOptions } from './guard.js';
import type { PeerResetOptions } from './peerResets.js';

/**
 * The gRPC server's connection settings: grpc-js channel options, and the bounds that the guard
 * keeps (see guard.ts). Envoy keeps its connections to tollgate open for as long as it can, so
 * without a maximum connection age the instances started later (a scale-out, a rolling deploy)
 * would receive no traffic: the age makes Envoy reconnect now and then, and its load balancer
 * then spreads the new connections. The guard keeps the age, not grpc-js (see guard.ts for why).
 */

/** Node's timers fire at once past 2^31 − 1 ms (24.8 days); grpc-js reads that value as "never". */
const NEVER_MS = 2 ** 31 - 1;

/** HTTP/2 SETTINGS_MAX_HEADER_LIST_SIZE: Envoy's calls carry a few hundred bytes of headers. */
export const MAX_HEADER_LIST_BYTES = 16 * 1024;

export function guardOptions(settings: GrpcServerSettings): GuardOptions {
  return {
    maxConnections: settings.maxConnections,
    maxCalls: settings.maxCalls,
    maxReceivingBytes: settings.maxReceivingBytes,
    callTimeoutMs: settings.callTimeoutMs,
    maxHeaderListBytes: MAX_HEADER_LIST_BYTES,
    maxConnectionAgeMs: settings.maxConnectionAgeMs,
    maxConnectionAgeGraceMs: settings.maxConnectionAgeGraceMs,
    maxConnectionIdleMs: settings.maxConnectionIdleMs,
  };
}

/**
 * The budget of resets per peer address (see peerResets.ts): GRPC_MAX_PEER_RESETS in 10 s, then
 * 10 s refused. The table of peers is as large as the connections one address may hold.
 */
export function peerResetOptions(settings: GrpcServerSettings): PeerResetOptions {
  return {
    maxResets: settings.maxPeerResets,
    periodMs: 10_000,
    coolDownMs: 10_000,
    maxPeers: 10_000,
  };
}

export function grpcServerOptions(settings: GrpcServerSettings): ServerOptions {
  return {
    // Server-side pings find connections whose peer vanished without closing them.
    'grpc.keepalive_time_ms': Math.min(settings.keepaliveTimeMs, NEVER_MS),
    'grpc.keepalive_timeout_ms': Math.min(settings.keepaliveTimeoutMs, NEVER_MS),
    // 0 means no limit: the option is left out, since HTTP/2 has no value that says so.
    ...(settings.maxConcurrentStreams > 0
      ? { 'grpc.max_concurrent_streams': settings.maxConcurrentStreams }
      : {}),
  };
}
