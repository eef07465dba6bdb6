/** The HTTP server's settings: its bounds and POST /json. */
export interface HttpServerSettings {
  /** Connections at once. */
  maxConnections: number;
  /** How long a request's headers may take to arrive. */
  headersTimeoutMs: number;
  /** How long a whole request may take to arrive. */
  requestTimeoutMs: number;
  /** POST /json: `auto` serves it unless gRPC requires client certificates. */
  json: 'auto' | 'on' | 'off';
}
