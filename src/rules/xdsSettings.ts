/** The xDS client's settings, with the reference's names and defaults. */
export interface XdsSettings {
  /** host:port of the management server (CONFIG_GRPC_XDS_SERVER_URL). */
  serverUrl: string;
  nodeId: string;
  nodeMetadata: Record<string, string>;
  /** Until a first stream has been opened: how long between attempts. */
  connectRetryIntervalMs: number;
  additionalHeaders: Record<string, string>;
  tls:
    | {
        certPath: string | undefined;
        keyPath: string | undefined;
        caPath: string | undefined;
        san: string | undefined;
      }
    | undefined;
  /** After a stream is lost: waits from `initialMs`, doubling up to `maxMs`. */
  backoff: { initialMs: number; maxMs: number; randomFactor: number; jitter: boolean };
  /** The largest response accepted; unset: gRPC's 4 MiB. */
  maxMessageBytes: number | undefined;
  /** Serve before the first configuration arrives, answering checks UNAVAILABLE meanwhile. */
  forceStart: boolean;
  /** With forceStart: health says NOT_SERVING until a configuration is loaded. */
  healthyWithConfigOnly: boolean;
  /** XDS_REFUSE_EMPTY_UPDATE: NACK an update that would remove every domain in force. */
  refuseEmptyUpdate: boolean;
}
