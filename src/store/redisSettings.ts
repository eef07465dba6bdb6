/**
 * How tollgate reaches Redis: `REDIS_TYPE` with its `REDIS_URL`. One shape for every type, so
 * that a single server is still written as `{ type: 'single', host, port, ... }`.
 */
export interface RedisSettings {
  type: 'single' | 'sentinel' | 'cluster';
  /** `single`: the server. `sentinel` and `cluster`: the first of `nodes`. */
  host: string;
  port: number;
  /** `single` only: the server's Unix socket, used instead of host and port. */
  path?: string;
  /** `sentinel`: the sentinels. `cluster`: the nodes to learn the slot map from; any will do. */
  nodes?: RedisNode[];
  /** `sentinel`: the name the sentinels know the master by. */
  masterName?: string;
  /** Credentials and TLS of the data nodes (for `sentinel`, TLS also reaches the sentinels). */
  username: string | undefined;
  password: string | undefined;
  /** Always 0 on a cluster. */
  db: number;
  tls: RedisTls | undefined;
  timeoutMs: number;
}

export interface RedisNode {
  host: string;
  port: number;
}

export interface RedisTls {
  caPath: string | undefined;
  clientCertPath: string | undefined;
  clientKeyPath: string | undefined;
  skipHostnameVerification: boolean;
}
