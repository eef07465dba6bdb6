/** The gRPC server's settings: its bounds, keepalive, fast path and TLS. */
export interface GrpcServerSettings {
  maxConnectionAgeMs: number;
  maxConnectionAgeGraceMs: number;
  /** GRPC_MAX_CONNECTION_IDLE: a connection with no call open this long is closed (GOAWAY). */
  maxConnectionIdleMs: number;
  /** Calls at once on one connection (HTTP/2 SETTINGS_MAX_CONCURRENT_STREAMS); 0: no limit. */
  maxConcurrentStreams: number;
  /** Connections at once, per listening address. */
  maxConnections: number;
  /** Calls open at once, across connections. */
  maxCalls: number;
  /** Bytes of requests still arriving, across calls. */
  maxReceivingBytes: number;
  /** How long a call may stay open, from its headers to its last byte. */
  callTimeoutMs: number;
  /** GRPC_MAX_PEER_RESETS: streams a peer address may reset unanswered in 10 s; 0: no bound. */
  maxPeerResets: number;
  keepaliveTimeMs: number;
  keepaliveTimeoutMs: number;
  /** GRPC_FAST_PATH: ShouldRateLimit on node:http2's streams directly; false: through grpc-js. */
  fastPath: boolean;
  /** TLS when GRPC_SERVER_USE_TLS is true; mutual TLS when `clientCaPath` is set. */
  tls:
    | {
        certPath: string;
        keyPath: string;
        clientCaPath: string | undefined;
        clientSan: string | undefined;
      }
    | undefined;
}

export type GrpcTlsSettings = NonNullable<GrpcServerSettings['tls']>;
