import type { RlqsStreamHandler } from './grpc/rlqsStream.js';
import type { Check, Decision, HeaderReader } from '../core/check.js';
import { SettingsError } from '../core/errors.js';
import type { RequestLimits } from './grpc/codec.js';
import { createServerCredentials } from './grpc/credentials.js';
import { createGrpcServer, routeGrpcLogs, type GrpcServer } from './grpc/server.js';
import { grpcServerOptions, guardOptions, peerResetOptions } from './grpc/serverOptions.js';
import type { GrpcServerSettings } from './grpc/serverSettings.js';
import {
  createDebugServer,
  createHttpServer,
  createInFlightBound,
  createMetricsServer,
  type HttpServer,
} from './http/server.js';
import type { HttpServerSettings } from './http/serverSettings.js';
import type { Logger } from '../core/logger.js';
import type { Bound } from '../observability/metrics.js';
import { shareBuilds } from '../observability/exposition.js';

/** /rlconfig requests answered at once; a dump may be megabytes. */
export const MAX_RLCONFIG_REQUESTS = 4;

/**
 * The servers a check arrives on: gRPC (ShouldRateLimit, health, reflection, RLQS's stream; the
 * fast path or grpc-js) and HTTP (POST /json, /healthcheck, /metrics, /rlconfig). Both take the
 * same checks and the same health; they listen, and drain, side by side.
 */
export interface Servers {
  /** Listens on each; resolves with the bound ports. */
  listen(): Promise<ListeningPorts>;
  /** Health of the gRPC health service, which polls nothing: told when it changes. */
  setServing(serving: boolean): void;
  /** In-flight calls finish within graceMs, then both close. */
  close(graceMs: number): Promise<void>;
}

/** A listener of its own for GET `path`, the metrics (PROMETHEUS_ADDR and PROMETHEUS_PATH). */
export interface MetricsListenSettings {
  /** undefined: every interface, as Go's `:9090` means. */
  host: string | undefined;
  port: number;
  path: string;
}

/**
 * Where GET /rlconfig is served (RLCONFIG): on the HTTP port, on a listener of its own as the
 * reference's debug port (DEBUG_HOST, DEBUG_PORT), or nowhere.
 */
export type RlconfigSettings =
  { on: 'http' } | { on: 'off' } | { on: 'debug'; host: string; port: number };

/** The ports bound; metricsPort and debugPort only for listeners of their own. */
export interface ListeningPorts {
  /** 0 when on a Unix socket. */
  grpcPort: number;
  httpPort: number;
  metricsPort?: number;
  debugPort?: number;
}

/** The settings the servers read. */
export interface ServerSettings {
  grpcHost: string;
  grpcPort: number;
  grpcUds: string | undefined;
  host: string;
  port: number;
  grpcServer: GrpcServerSettings;
  http: HttpServerSettings;
  maxDescriptors: number;
  maxEntries: number;
  maxEntryBytes: number;
  limitOverrides: boolean;
  compatMode: 'off' | 'reference';
  prometheus: MetricsListenSettings | undefined;
  rlconfig: RlconfigSettings;
}

export interface ServersOptions {
  settings: ServerSettings;
  decide: <C>(check: Check, headers: C, readHeader: HeaderReader<C>) => Promise<Decision>;
  health: () => { serving: boolean; reason: string };
  /** What GET /metrics answers; builds are shared by the scrapes that wait for them. */
  metrics: () => Promise<{ contentType: string; body: string }>;
  /** What GET /rlconfig answers. */
  rlconfig: () => Promise<Buffer>;
  logger: Logger;
  /** What the servers count: requests refused as malformed, and bounds reached. */
  events: ServerEvents;
  /** RLQS's StreamRateLimitQuotas on the gRPC port (grpc/rlqsStream.ts); unset: not offered. */
  rlqs?: RlqsStreamHandler;
}

export interface ServerEvents {
  invalidRequest(): void;
  boundReached(bound: Bound): void;
}

export function createServers(options: ServersOptions): Servers {
  const { settings, logger, events } = options;
  const limits: RequestLimits = {
    maxDescriptors: settings.maxDescriptors,
    maxEntries: settings.maxEntries,
    maxEntryBytes: settings.maxEntryBytes,
    limitOverrides: settings.limitOverrides,
    emptyDescriptors: settings.compatMode === 'reference',
  };
  const onInternalError = (error: unknown) =>
    logger.error({ err: error }, 'internal error answering a check');
  const onInvalidRequest = () => events.invalidRequest();
  // At grpc-js's own severity: GRPC_VERBOSITY (ERROR by default) chooses what it says at all.
  routeGrpcLogs((level, line) => logger[level]({ source: 'grpc-js' }, line));
  const grpc = createGrpcServer({
    decide: options.decide,
    rlqs: options.rlqs,
    limits,
    onInternalError,
    onInvalidRequest,
    serverOptions: grpcServerOptions(settings.grpcServer),
    fastPath: settings.grpcServer.fastPath,
    clientSan: settings.grpcServer.tls?.clientSan,
    guard: {
      ...guardOptions(settings.grpcServer),
      onBound: (bound) => events.boundReached(`grpc_${bound}`),
    },
    onHealthWatchBound: () => events.boundReached('grpc_health_watches'),
    peerResets: {
      ...peerResetOptions(settings.grpcServer),
      onBound: () => events.boundReached('grpc_peer_resets'),
    },
    credentials: createServerCredentials(settings.grpcServer.tls, {
      onReloadError: (error) =>
        logger.error({ err: error }, 'TLS files not reloaded; serving the previous ones'),
    }),
  });
  const listener = {
    onInternalError,
    bounds: settings.http,
    onConnectionRefused: () => events.boundReached('http_connections'),
  };
  // Scrapes wait for a shared exposition rather than being refused: the kubelet's liveness probe
  // asks /metrics too, and must not fail under a flood. Its bytes are encoded once, for all.
  const metrics = {
    metrics: shareBuilds(async () => {
      const { contentType, body } = await options.metrics();
      return { contentType, body: Buffer.from(body) };
    }),
  };
  const rlconfig = {
    rlconfig: options.rlconfig,
    rlconfigBound: createInFlightBound(MAX_RLCONFIG_REQUESTS, () =>
      events.boundReached('http_rlconfig'),
    ),
  };
  const http = createHttpServer({
    ...listener,
    ...metrics,
    ...(settings.rlconfig.on === 'http' ? rlconfig : {}),
    decide: options.decide,
    health: options.health,
    limits,
    onInvalidRequest,
    jsonRefusal: jsonRefusal(settings),
  });
  const others = {
    metrics:
      settings.prometheus &&
      createMetricsServer({ ...listener, ...metrics, path: settings.prometheus.path }),
    debug:
      settings.rlconfig.on === 'debug'
        ? createDebugServer({ ...listener, ...rlconfig })
        : undefined,
  };
  return {
    listen: () => listenAll(settings, grpc, http, others),
    setServing: (serving) => grpc.setServing(serving),
    async close(graceMs) {
      await Promise.all([
        grpc.shutdown(graceMs),
        http.close(graceMs),
        others.metrics?.close(graceMs),
        others.debug?.close(graceMs),
      ]);
    },
  };
}

async function listenAll(
  settings: ServerSettings,
  grpc: GrpcServer,
  http: HttpServer,
  others: { metrics: HttpServer | undefined; debug: HttpServer | undefined },
): Promise<ListeningPorts> {
  const grpcAddress = settings.grpcUds ?? `${settings.grpcHost}:${settings.grpcPort}`;
  const grpcPort = await (
    settings.grpcUds
      ? grpc.listen(`unix:${settings.grpcUds}`)
      : grpc.listen(settings.grpcHost, settings.grpcPort)
  ).catch((error: unknown) => {
    throw listenError(settings.grpcUds ? 'GRPC_UDS' : 'GRPC_PORT', grpcAddress, error);
  });
  const httpPort = await http.listen(settings.host, settings.port).catch((error: unknown) => {
    throw listenError('PORT', `${settings.host}:${settings.port}`, error);
  });
  const ports: ListeningPorts = { grpcPort, httpPort };
  const prometheus = settings.prometheus;
  if (others.metrics !== undefined && prometheus !== undefined) {
    ports.metricsPort = await others.metrics
      .listen(prometheus.host, prometheus.port)
      .catch((error: unknown) => {
        throw listenError('PROMETHEUS_ADDR', `${prometheus.host ?? ''}:${prometheus.port}`, error);
      });
  }
  const rlconfig = settings.rlconfig;
  if (others.debug !== undefined && rlconfig.on === 'debug') {
    ports.debugPort = await others.debug.listen(rlconfig.host, rlconfig.port).catch((error) => {
      throw listenError('DEBUG_PORT', `${rlconfig.host}:${rlconfig.port}`, error);
    });
  }
  return ports;
}

/**
 * A port that cannot be bound, as a SettingsError naming the setting: main prints it as
 * `tollgate: MESSAGE` and exits 1, as for any bad setting, with no stack.
 */
function listenError(setting: string, address: string, error: unknown): SettingsError {
  const text = error instanceof Error ? error.message : String(error);
  const code = (error as NodeJS.ErrnoException).code ?? /\b(E[A-Z]+)\b/.exec(text)?.[1];
  const why =
    code === 'EADDRINUSE'
      ? 'is already in use by another process'
      : code === 'EACCES'
        ? 'needs privileges this process lacks (a port below 1024?)'
        : code === 'EADDRNOTAVAIL'
          ? 'is not an address of this host'
          : `cannot be listened on: ${text}`;
  return new SettingsError(`${setting}: ${address} ${why}`, { cause: error });
}

/**
 * Why POST /json refuses checks, or undefined when it serves them. While gRPC requires client
 * certificates, the plain HTTP port would let anyone spend the quotas that only certified callers
 * may: it refuses unless HTTP_JSON=on says to serve it anyway.
 */
function jsonRefusal(settings: ServerSettings): string | undefined {
  if (settings.http.json === 'on') return undefined;
  if (settings.http.json === 'off') return 'POST /json is off (HTTP_JSON=off)';
  if (settings.grpcServer.tls?.clientCaPath === undefined) return undefined;
  return (
    'POST /json is off while gRPC requires client certificates (GRPC_CLIENT_TLS_CACERT), ' +
    'which this plain HTTP port cannot ask for; HTTP_JSON=on serves it anyway'
  );
}
