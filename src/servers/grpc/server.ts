/**
 * The gRPC server: Envoy's RLS as a thin adapter over `decide`, plus grpc.health.v1 and server
 * reflection (so grpcurl and ghz need no proto file). The core knows nothing of gRPC.
 */
import http2, { type ServerHttp2Stream } from 'node:http2';
import type { Socket } from 'node:net';
import * as grpc from '@grpc/grpc-js';
import { grpcLogLine } from '../../core/logger.js';
import type { Check, Decision, HeaderReader } from '../../core/check.js';
import {
  createRequestDecoder,
  type DecodedRequest,
  type RequestLimits,
  type ResponseHeader,
} from './codec.js';
import { createFastPath, SHOULD_RATE_LIMIT_PATH } from './fastPath.js';
import { createConnectionTracker, type ConnectionTracker } from './drain.js';
import { createGuard, type Guard, type GuardOptions, type Http2Server } from './guard.js';
import { dispatchStreams, type StreamHandler } from './http2Dispatch.js';
import { addHealth, HEALTH_WATCH_PATH, type Health } from './health.js';
import { createPeerResets, type PeerResetOptions, type PeerResets } from './peerResets.js';
import { encodeResponseFrame } from './responseFrame.js';
import {
  packageDefinition,
  rlqsServiceName,
  rlsServiceName,
  shouldRateLimitMethod,
} from '../../core/protos.js';
import type * as protoLoader from '@grpc/proto-loader';
import type { RlqsStreamHandler } from './rlqsStream.js';
import { addReflection } from './reflection.js';
import { toGrpcStatus } from './status.js';

/** A decision, with the headers to add to the downstream response. */
export type Reply = Decision & { headers?: readonly ResponseHeader[] };

export interface GrpcServerOptions {
  /**
   * Decides a valid check; `readHeader(headers, name)` reads the call's metadata. May reject with
   * InvalidRequestError or StoreError.
   */
  decide<C>(check: Check, headers: C, readHeader: HeaderReader<C>): Promise<Reply>;
  limits: RequestLimits;
  /** Told of each error answered INTERNAL, i.e. a bug, for the caller to log. */
  onInternalError?(error: unknown): void;
  /** Told of each request refused as malformed before `decide`, for metrics. */
  onInvalidRequest?(): void;
  /** grpc-js server options, e.g. message size limits or keepalive (see `grpcServerOptions`). */
  serverOptions?: grpc.ServerOptions;
  /** TLS for every address listened on (see `createServerCredentials`); insecure by default. */
  credentials?: grpc.ServerCredentials;
  /** Bounds on connections, calls and their bytes and time (see guard.ts); none by default. */
  guard?: GuardOptions;
  /** A budget of stream resets per peer address (see peerResets.ts); none by default. */
  peerResets?: PeerResetOptions;
  /**
   * Serves ShouldRateLimit on the HTTP/2 server's own streams, ahead of grpc-js (see
   * fastPath.ts); every other method stays on grpc-js. Off by default.
   */
  fastPath?: boolean;
  /** GRPC_CLIENT_TLS_SAN, which the fast path checks itself (grpc-js by an interceptor). */
  clientSan?: string;
  /**
   * Serves RLQS's StreamRateLimitQuotas (see rlqsStream.ts), with health of its own name. Its
   * streams live long: the guard counts them on their connections and budgets the bytes of a
   * message still arriving, but does not time them out.
   */
  rlqs?: RlqsStreamHandler;
  /** Told of each health Watch refused past MAX_HEALTH_WATCHES. */
  onHealthWatchBound?(): void;
}

export interface GrpcServer {
  /**
   * Binds TCP host:port (port 0 picks a free one) and resolves with the bound port. Without a
   * port, host is a whole grpc-js address, e.g. `unix:/run/tollgate.sock` (which resolves 0).
   */
  listen(host: string, port?: number): Promise<number>;
  /** Flips health of "" and the RLS service between SERVING and NOT_SERVING. */
  setServing(serving: boolean): void;
  /** Lets calls in flight finish for up to graceMs, then cancels the rest. */
  shutdown(graceMs: number): Promise<void>;
}

type RequestDecoder = (bytes: Buffer) => DecodedRequest;

/** StreamRateLimitQuotas's path, which the guard tells apart from short calls. */
export const RLQS_STREAM_PATH = `/${rlqsServiceName}/StreamRateLimitQuotas`;
/**
 * Health Watch streams open at once: one a client connection (grpc-go's and grpc-java's
 * client-side health checking) for a thousand clients; Envoy's health checks are Check calls.
 */
export const MAX_HEALTH_WATCHES = 1_000;
/** grpc-js's receive limit when `grpc.max_receive_message_length` is not set. */
const DEFAULT_MAX_RECEIVE_MESSAGE_BYTES = 4 * 1024 * 1024;

function noDelay(socket: Socket): void {
  socket.setNoDelay(true);
}

/**
 * grpc-js logs a failed bind just before it rejects `bindAsync`; the rejection names the setting
 * and the port (servers.ts), so this line would only say the same thing first, and less clearly.
 */
const FAILED_BIND = /^No address added out of total \d+ resolved$/;

/**
 * grpc-js logs to stderr itself; its lines go to `log` instead, so that they reach the service's
 * structured log and stderr keeps only what stops start-up. It is one setting for the process.
 */
export function routeGrpcLogs(
  log: (level: 'error' | 'info' | 'debug', line: string) => void,
): void {
  const at =
    (level: 'error' | 'info' | 'debug') =>
    (...args: unknown[]) => {
      const line = grpcLogLine(args);
      if (line !== undefined && !FAILED_BIND.test(line)) log(level, line);
    };
  grpc.setLogger({ error: at('error'), info: at('info'), debug: at('debug') });
}

/** Text values only: a `-bin` key's Buffers are not headers a check reads. */
const metadataHeader: HeaderReader<grpc.Metadata> = (metadata, name) => {
  const values = metadata.get(name).filter((value) => typeof value === 'string');
  return values.length === 0 ? undefined : values;
};

export function createGrpcServer(options: GrpcServerOptions): GrpcServer {
  const server = new grpc.Server(options.serverOptions);
  const guard = options.guard ? createGuard(options.guard) : undefined;
  const decodeRequest = createRequestDecoder(options.limits);
  const connections = createConnectionTracker();
  const peerResets = options.peerResets && createPeerResets(options.peerResets);
  dispatchStreams(server, {
    handlers: ownStreamHandlers(options, decodeRequest, guard),
    onGrpcJsStream: guard && ((stream, path) => guardGrpcJsStream(guard, stream, path, options)),
    onStream: peerResets?.watch,
    configure: (http2Server) => {
      configureHttp2Server(http2Server, guard, connections);
      peerResets?.configure(http2Server);
    },
  });
  addRateLimitService(server, decodeRequest, createShouldRateLimit(options));
  if (options.rlqs) addRlqsService(server, options.rlqs);
  const health = addHealth(server, {
    names: options.rlqs ? ['', rlsServiceName, rlqsServiceName] : ['', rlsServiceName],
    maxWatches: MAX_HEALTH_WATCHES,
    onBound: options.onHealthWatchBound,
  });
  addReflection(server, packageDefinition);

  const credentials = options.credentials ?? grpc.ServerCredentials.createInsecure();
  return {
    listen: (host, port) => bindAddress(server, credentials, host, port),
    setServing: health.setServing,
    shutdown: (graceMs) =>
      shutdownServer(server, graceMs, { health, connections, guard, peerResets }),
  };
}

/** The streams served ahead of grpc-js: ShouldRateLimit, when the fast path is on. */
function ownStreamHandlers(
  options: GrpcServerOptions,
  decodeRequest: RequestDecoder,
  guard: Guard | undefined,
): Map<string, StreamHandler> {
  const handlers = new Map<string, StreamHandler>();
  if (!options.fastPath) return handlers;
  const maxReceive = options.serverOptions?.['grpc.max_receive_message_length'];
  handlers.set(
    SHOULD_RATE_LIMIT_PATH,
    createFastPath({
      decide: options.decide,
      decodeRequest,
      maxReceiveMessageBytes:
        typeof maxReceive === 'number' ? maxReceive : DEFAULT_MAX_RECEIVE_MESSAGE_BYTES,
      clientSan: options.clientSan,
      guard,
      onInternalError: options.onInternalError,
      onInvalidRequest: options.onInvalidRequest,
    }),
  );
  return handlers;
}

/** Each of grpc-js's HTTP/2 servers, before it listens. */
function configureHttp2Server(
  http2Server: Http2Server,
  guard: Guard | undefined,
  connections: ConnectionTracker,
): void {
  guard?.configure(http2Server);
  connections.track(http2Server);
  // Replies are small and go at once: Nagle's delay would only hold them back.
  http2Server.on('connection', noDelay);
}

/**
 * A stream grpc-js serves is a call with the guard's bounds, but for the long-lived ones, RLQS's
 * and health Watch's, which the guard only counts on their connections.
 */
function guardGrpcJsStream(
  guard: Guard,
  stream: ServerHttp2Stream,
  path: string | undefined,
  options: Pick<GrpcServerOptions, 'rlqs'>,
): void {
  const longLived = path === HEALTH_WATCH_PATH || (options.rlqs && path === RLQS_STREAM_PATH);
  if (longLived) guard.hold(stream);
  else guard.watch(stream);
}

/** ShouldRateLimit on grpc-js: requests decoded by the codec, replies encoded by the handler. */
function addRateLimitService(
  server: grpc.Server,
  decodeRequest: RequestDecoder,
  shouldRateLimit: grpc.handleUnaryCall<DecodedRequest, Buffer>,
): void {
  server.addService(
    {
      ShouldRateLimit: {
        ...shouldRateLimitMethod,
        // A bad request decodes to a value, not a throw: grpc-js answers a throw with INTERNAL.
        requestDeserialize: decodeRequest,
        responseSerialize: (bytes: Buffer) => bytes,
      },
    },
    { ShouldRateLimit: shouldRateLimit },
  );
}

/** RLQS on grpc-js, with proto-loader's (de)serializers. */
function addRlqsService(server: grpc.Server, handler: RlqsStreamHandler): void {
  const service = packageDefinition[rlqsServiceName] as protoLoader.ServiceDefinition;
  const serve: grpc.handleBidiStreamingCall<unknown, unknown> = (call) =>
    handler(call, { reset: (code) => resetCall(call, code) });
  server.addService(service as unknown as grpc.ServiceDefinition, {
    StreamRateLimitQuotas: serve,
  });
}

/**
 * Resets the HTTP/2 stream of one of grpc-js's calls. grpc-js gives no public way to it: its call
 * keeps the stream as `stream`, under the interceptors' `nextCall`s. Without it (grpc-js changed),
 * the call is destroyed, which drops the answers it queued.
 */
function resetCall(call: grpc.ServerDuplexStream<unknown, unknown>, code: grpc.status): void {
  const stream = http2StreamOf(call);
  if (stream === undefined) {
    call.destroy();
  } else if (!stream.closed && !stream.destroyed) {
    const { NGHTTP2_ENHANCE_YOUR_CALM, NGHTTP2_CANCEL } = http2.constants;
    stream.close(
      code === grpc.status.RESOURCE_EXHAUSTED ? NGHTTP2_ENHANCE_YOUR_CALM : NGHTTP2_CANCEL,
    );
  }
}

type CallLayer = { stream?: unknown; nextCall?: unknown; call?: unknown };

function http2StreamOf(call: object): http2.ServerHttp2Stream | undefined {
  let layer = (call as CallLayer).call;
  for (let depth = 0; depth < 16 && typeof layer === 'object' && layer !== null; depth++) {
    const { stream, nextCall } = layer as CallLayer;
    if (typeof stream === 'object' && stream !== null && 'rstCode' in stream) {
      return stream as http2.ServerHttp2Stream;
    }
    layer = nextCall;
  }
  return undefined;
}

type CheckOptions = Pick<GrpcServerOptions, 'decide' | 'onInternalError' | 'onInvalidRequest'>;

/**
 * ShouldRateLimit as grpc-js serves it. The handler encodes the reply itself so that an encoding
 * failure still goes through toGrpcStatus; grpc-js would turn a throwing serializer into a bare
 * INTERNAL.
 */
function createShouldRateLimit(
  options: CheckOptions,
): grpc.handleUnaryCall<DecodedRequest, Buffer> {
  return (call, callback) => {
    const request = call.request;
    if (!request.ok) {
      options.onInvalidRequest?.();
      return fail(callback, request.error, options);
    }
    let reply: Promise<Reply>;
    try {
      reply = options.decide(request.check, call.metadata, metadataHeader);
    } catch (error) {
      return fail(callback, error, options);
    }
    reply.then(
      (decided) => {
        let bytes: Buffer;
        try {
          bytes = encodeResponseFrame(decided, decided.headers).subarray(5);
        } catch (error) {
          return fail(callback, error, options);
        }
        callback(null, bytes);
      },
      (error: unknown) => fail(callback, error, options),
    );
  };
}

function fail(
  callback: grpc.sendUnaryData<Buffer>,
  error: unknown,
  options: Pick<CheckOptions, 'onInternalError'>,
): void {
  const status = toGrpcStatus(error);
  if (status.code === grpc.status.INTERNAL) options.onInternalError?.(error);
  callback(status);
}

function bindAddress(
  server: grpc.Server,
  credentials: grpc.ServerCredentials,
  host: string,
  port?: number,
): Promise<number> {
  const bare = host.includes(':') && !host.startsWith('['); // an IPv6 literal needs brackets
  const address = port === undefined ? host : `${bare ? `[${host}]` : host}:${port}`;
  return new Promise((resolve, reject) => {
    server.bindAsync(address, credentials, (error, bound) =>
      error ? reject(error) : resolve(address.startsWith('unix:') ? 0 : bound),
    );
  });
}

/**
 * NOT_SERVING, and health Watch streams ended; then the calls in flight get up to graceMs, and the
 * rest are cancelled.
 */
function shutdownServer(
  server: grpc.Server,
  graceMs: number,
  parts: {
    health: Health;
    connections: ConnectionTracker;
    guard: Guard | undefined;
    peerResets: PeerResets | undefined;
  },
): Promise<void> {
  return new Promise((resolve) => {
    parts.health.setServing(false);
    // Watchers have been told NOT_SERVING: their streams end, and the drain does not wait for them.
    parts.health.endWatches();
    const done = () => {
      clearTimeout(timer);
      stopWaiting();
      parts.guard?.close();
      parts.peerResets?.close();
      resolve();
    };
    const timer = setTimeout(() => {
      server.forceShutdown();
      done();
    }, graceMs);
    // grpc-js may wait for a connection that is already gone (see drain.ts).
    const stopWaiting = parts.connections.whenDrained(() => {
      server.forceShutdown();
      done();
    });
    server.tryShutdown(done);
  });
}
