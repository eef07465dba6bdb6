/**
 * The HTTP port, as the reference service (envoyproxy/ratelimit) serves it: `GET /healthcheck`,
 * `POST /json` (ShouldRateLimit in proto3 JSON), `GET /metrics` and `GET /rlconfig`, on node:http
 * alone; and the listeners of their own for the metrics (PROMETHEUS_ADDR) and for /rlconfig
 * (RLCONFIG=debug). Like the gRPC server it is a thin adapter: the service owns health, metrics
 * and rules.
 */
import { isUtf8 } from 'node:buffer';
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import type { Check, Decision, HeaderReader } from '../../core/check.js';
import type { DecodedRequest, RequestLimits } from '../grpc/codec.js';
import { readBody } from './readBody.js';
import { toHttpError, type HttpReply } from './httpError.js';
import { createJsonRequestDecoder } from './jsonRequest.js';
import { toJsonResponse } from './jsonResponse.js';

const httpHeader: HeaderReader<http.IncomingHttpHeaders> = (headers, name) => headers[name];

export interface HttpServerOptions {
  /**
   * Decides a valid check; `readHeader(headers, name)` reads the request's headers. May reject
   * with InvalidRequestError or StoreError.
   */
  decide<C>(check: Check, headers: C, readHeader: HeaderReader<C>): Promise<Decision>;
  /** The body of /healthcheck is `reason`, verbatim: e.g. "OK" or "NOT_SERVING: draining". */
  health(): { serving: boolean; reason: string };
  /** The body of /metrics and its content type, e.g. prom-client's registry. */
  metrics(): Promise<{ contentType: string; body: string | Buffer }>;
  /** /rlconfig's text, one line per loaded rule; unset: not served here (404). */
  rlconfig?: () => Promise<Buffer>;
  rlconfigBound?: InFlightBound;
  limits: RequestLimits;
  /** Told of each error answered 500, i.e. a bug, for the caller to log. */
  onInternalError?(error: unknown): void;
  /** Told of each /json request refused as malformed (400) before `decide`, for metrics. */
  onInvalidRequest?(): void;
  /**
   * POST /json's checks are refused (403) with this reason, e.g. while gRPC requires client
   * certificates that this port cannot ask for; served when undefined.
   */
  jsonRefusal?: string;
  /** What one client can hold (see `HttpBounds`); Node's defaults when undefined. */
  bounds?: HttpBounds;
  /** Told of each connection closed as it was accepted, past `bounds.maxConnections`. */
  onConnectionRefused?(): void;
}

/**
 * Bounds that keep slow or numerous HTTP clients from starving the process (file descriptors,
 * memory) and with it the gRPC port. A request whose headers or whole body take longer than their
 * timeout is answered 408 and its connection closed.
 */
export interface HttpBounds {
  maxConnections: number;
  headersTimeoutMs: number;
  requestTimeoutMs: number;
}

export interface HttpServer {
  /**
   * Binds host:port (port 0 picks a free one; no host: every interface) and resolves with the
   * bound port.
   */
  listen(host: string | undefined, port: number): Promise<number>;
  /** Stops accepting, lets requests in flight finish for up to graceMs, then drops the rest. */
  close(graceMs: number): Promise<void>;
}

/** A larger /json body is answered 413 without being buffered. */
export const MAX_JSON_BODY_BYTES = 1024 * 1024;

interface Route {
  methods: readonly string[];
  handle(request: http.IncomingMessage): HttpReply | Promise<HttpReply>;
  /** Requests of this path at once; past it, 503. */
  bound?: InFlightBound;
}

/**
 * At most `max` requests of a path answered at once, from the request until its answer is sent
 * (or its connection gone); past it, 503 with Retry-After, and `onRefused`. One bound may be
 * shared by the listeners that serve the same path.
 */
export interface InFlightBound {
  /** Takes a place; false when all are taken. */
  take(): boolean;
  release(): void;
}

export function createInFlightBound(max: number, onRefused: () => void): InFlightBound {
  let held = 0;
  return {
    take() {
      if (held >= max) {
        onRefused();
        return false;
      }
      held++;
      return true;
    },
    release() {
      held--;
    },
  };
}

const text = (status: number, body: string): HttpReply => ({
  status,
  body,
  contentType: 'text/plain; charset=utf-8',
});

export function createHttpServer(options: HttpServerOptions): HttpServer {
  return serveRoutes(createRoutes(options), options);
}

type ListenerOptions = Pick<
  HttpServerOptions,
  'onInternalError' | 'bounds' | 'onConnectionRefused'
>;

/** What the metrics' own listener needs (PROMETHEUS_ADDR): the path, and what it answers. */
export type MetricsServerOptions = ListenerOptions &
  Pick<HttpServerOptions, 'metrics'> & { path: string };

/** A listener that answers GET `path` with the metrics, and nothing else. */
export function createMetricsServer(options: MetricsServerOptions): HttpServer {
  const routes = new Map<string, Route>([
    [options.path, { methods: GET, handle: () => metrics(options) }],
  ]);
  return serveRoutes(routes, options);
}

/** What the debug listener needs (RLCONFIG=debug): what /rlconfig answers. */
export type DebugServerOptions = ListenerOptions &
  Required<Pick<HttpServerOptions, 'rlconfig'>> &
  Pick<HttpServerOptions, 'rlconfigBound'>;

/** A listener that answers GET /rlconfig, as the reference's debug port does, and nothing else. */
export function createDebugServer(options: DebugServerOptions): HttpServer {
  const routes = new Map<string, Route>([['/rlconfig', rlconfigRoute(options.rlconfig, options)]]);
  return serveRoutes(routes, options);
}

const GET = ['GET', 'HEAD'];

function serveRoutes(
  routes: ReadonlyMap<string, Route>,
  options: Pick<HttpServerOptions, 'onInternalError' | 'bounds' | 'onConnectionRefused'>,
): HttpServer {
  let closing = false;
  const server = createNodeServer(options, (request, response) => {
    route(routes, request, response, options)
      .then((reply) => send(response, reply, closing))
      .catch((error: unknown) => {
        // E.g. a content type from metrics() that is not a valid header value.
        if (response.headersSent) response.destroy();
        else send(response, toHttpError(error, options.onInternalError), closing);
      })
      .catch(() => response.destroy());
  });

  return {
    listen: (host, port) => listenOn(server, host, port),
    close: (graceMs) => {
      closing = true;
      return closeWithin(server, graceMs);
    },
  };
}

/** Each path with its methods and its handler, built once. */
function createRoutes(options: HttpServerOptions): ReadonlyMap<string, Route> {
  const decodeJson = createJsonRequestDecoder(options.limits);
  const routes = new Map<string, Route>([
    ['/healthcheck', { methods: GET, handle: () => healthcheck(options) }],
    ['/json', { methods: ['POST'], handle: (request) => json(request, options, decodeJson) }],
    ['/metrics', { methods: GET, handle: () => metrics(options) }],
  ]);
  if (options.rlconfig) routes.set('/rlconfig', rlconfigRoute(options.rlconfig, options));
  return routes;
}

function rlconfigRoute(
  rlconfig: () => Promise<Buffer>,
  options: Pick<HttpServerOptions, 'rlconfigBound'>,
): Route {
  return {
    methods: GET,
    handle: async () => ({ ...text(200, ''), body: await rlconfig() }),
    bound: options.rlconfigBound,
  };
}

/** Answers the route of the request's path, or 404 or 405; a handler's error becomes its reply. */
async function route(
  routes: ReadonlyMap<string, Route>,
  request: http.IncomingMessage,
  response: http.ServerResponse,
  options: Pick<HttpServerOptions, 'onInternalError'>,
): Promise<HttpReply> {
  const path = (request.url ?? '/').split('?', 1)[0] ?? '/';
  const found = routes.get(path);
  if (found === undefined) return text(404, `no such path: ${path}`);
  if (!found.methods.includes(request.method ?? '')) {
    const allow = found.methods.join(', ');
    return { ...text(405, `${path} allows ${allow}`), headers: { Allow: allow } };
  }
  const bound = found.bound;
  if (bound !== undefined) {
    if (!bound.take()) {
      const busy = `too many ${path} requests at once; try again shortly`;
      return { ...text(503, busy), headers: { 'Retry-After': '1' } };
    }
    response.once('close', () => bound.release());
  }
  try {
    return await found.handle(request);
  } catch (error) {
    return toHttpError(error, options.onInternalError);
  }
}

function healthcheck(options: Pick<HttpServerOptions, 'health'>): HttpReply {
  const { serving, reason } = options.health();
  return text(serving ? 200 : 500, reason);
}

/** ShouldRateLimit in proto3 JSON: 200, or 429 when over the limit. */
async function json(
  request: http.IncomingMessage,
  options: Pick<HttpServerOptions, 'decide' | 'jsonRefusal' | 'onInvalidRequest'>,
  decodeJson: (json: unknown) => DecodedRequest,
): Promise<HttpReply> {
  if (options.jsonRefusal !== undefined) {
    return { ...text(403, options.jsonRefusal), close: true };
  }
  const body = await readBody(request, MAX_JSON_BODY_BYTES);
  if (body === 'too large') {
    return { ...text(413, `request body over ${MAX_JSON_BODY_BYTES} bytes`), close: true };
  }
  // The client went away; nobody reads this answer.
  if (body === 'unreadable') return { ...text(400, 'request body unreadable'), close: true };
  if (!isUtf8(body)) return invalid('request body is not valid UTF-8', options);
  let parsed: unknown;
  try {
    parsed = JSON.parse(body.toString('utf8'));
  } catch (error) {
    return invalid(`request body is not JSON: ${(error as Error).message}`, options);
  }
  const decoded = decodeJson(parsed);
  if (!decoded.ok) return invalid(decoded.error.message, options);
  const decision = await options.decide(decoded.check, request.headers, httpHeader);
  return {
    status: decision.code === 'OVER_LIMIT' ? 429 : 200,
    body: JSON.stringify(toJsonResponse(decision)),
    contentType: 'application/json',
  };
}

function invalid(reason: string, options: Pick<HttpServerOptions, 'onInvalidRequest'>): HttpReply {
  options.onInvalidRequest?.();
  return text(400, reason);
}

async function metrics(options: Pick<HttpServerOptions, 'metrics'>): Promise<HttpReply> {
  return { status: 200, ...(await options.metrics()) };
}

function send(response: http.ServerResponse, reply: HttpReply, closing: boolean): void {
  response.writeHead(reply.status, {
    ...reply.headers,
    'Content-Type': reply.contentType,
    'Content-Length': Buffer.byteLength(reply.body),
    // Keep-alive would hold a connection open past close(); a refused body is left unread.
    ...(closing || reply.close ? { Connection: 'close' } : {}),
  });
  response.end(reply.body);
}

/** node:http's server, with the bounds applied when there are some. */
function createNodeServer(
  options: Pick<HttpServerOptions, 'bounds' | 'onConnectionRefused' | 'onInternalError'>,
  serve: http.RequestListener,
): http.Server {
  const bounds = options.bounds;
  const server = http.createServer(
    bounds === undefined
      ? {}
      : {
          headersTimeout: bounds.headersTimeoutMs,
          requestTimeout: bounds.requestTimeoutMs,
          // How often Node looks for requests past those timeouts; 30 s by default.
          connectionsCheckingInterval: Math.max(100, Math.min(1_000, bounds.headersTimeoutMs / 4)),
        },
    serve,
  );
  if (bounds !== undefined) {
    // Past it, Node closes an accepted connection before reading from it.
    server.maxConnections = bounds.maxConnections;
    server.on('drop', () => options.onConnectionRefused?.());
  }
  // After listen: errors of the listening socket itself, which must not crash the process.
  server.on('error', (error) => server.listening && options.onInternalError?.(error));
  return server;
}

function listenOn(server: http.Server, host: string | undefined, port: number): Promise<number> {
  return new Promise((resolve, reject) => {
    server.once('error', reject);
    server.listen(port, host, () => {
      server.off('error', reject);
      resolve((server.address() as AddressInfo).port);
    });
  });
}

/** Stops accepting; connections still open after graceMs are dropped. */
function closeWithin(server: http.Server, graceMs: number): Promise<void> {
  return new Promise((resolve) => {
    if (!server.listening) return resolve();
    const timer = setTimeout(() => server.closeAllConnections(), graceMs);
    // Node 20's close() also ends idle keep-alive connections at once.
    server.close(() => {
      clearTimeout(timer);
      resolve();
    });
  });
}
