/**
 * The HTTP port, as the reference service (envoyproxy/ratelimit) serves it: `GET /healthcheck`,
 * `POST /json` (ShouldRateLimit in proto3 JSON), `GET /metrics` and `GET /rlconfig`, on node:http
 * alone. Like the gRPC server it is a thin adapter: the service owns health, metrics and rules.
 */
import { isUtf8 } from 'node:buffer';
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import type { Check, Decision, HeaderReader } from '../check.js';
import type { RequestLimits } from '../grpc/codec.js';
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
  metrics(): Promise<{ contentType: string; body: string }>;
  /** /rlconfig: one line per loaded rule. */
  rules(): readonly string[];
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
  /** Binds host:port (port 0 picks a free one) and resolves with the bound port. */
  listen(host: string, port: number): Promise<number>;
  /** Stops accepting, lets requests in flight finish for up to graceMs, then drops the rest. */
  close(graceMs: number): Promise<void>;
}

/** A larger /json body is answered 413 without being buffered. */
export const MAX_JSON_BODY_BYTES = 1024 * 1024;

interface Route {
  methods: readonly string[];
  handle(request: http.IncomingMessage): HttpReply | Promise<HttpReply>;
}

const text = (status: number, body: string): HttpReply => ({
  status,
  body,
  contentType: 'text/plain; charset=utf-8',
});

export function createHttpServer(options: HttpServerOptions): HttpServer {
  const decodeJson = createJsonRequestDecoder(options.limits);
  const fail = (error: unknown): HttpReply => toHttpError(error, options.onInternalError);
  const invalid = (reason: string): HttpReply => {
    options.onInvalidRequest?.();
    return text(400, reason);
  };

  async function json(request: http.IncomingMessage): Promise<HttpReply> {
    if (options.jsonRefusal !== undefined) {
      return { ...text(403, options.jsonRefusal), close: true };
    }
    const body = await readBody(request, MAX_JSON_BODY_BYTES);
    if (body === 'too large') {
      return { ...text(413, `request body over ${MAX_JSON_BODY_BYTES} bytes`), close: true };
    }
    // The client went away; nobody reads this answer.
    if (body === 'unreadable') return { ...text(400, 'request body unreadable'), close: true };
    if (!isUtf8(body)) return invalid('request body is not valid UTF-8');
    let parsed: unknown;
    try {
      parsed = JSON.parse(body.toString('utf8'));
    } catch (error) {
      return invalid(`request body is not JSON: ${(error as Error).message}`);
    }
    const decoded = decodeJson(parsed);
    if (!decoded.ok) return invalid(decoded.error.message);
    const decision = await options.decide(decoded.check, request.headers, httpHeader);
    return {
      status: decision.code === 'OVER_LIMIT' ? 429 : 200,
      body: JSON.stringify(toJsonResponse(decision)),
      contentType: 'application/json',
    };
  }

  const GET = ['GET', 'HEAD'];
  const routes = new Map<string, Route>([
    ['/healthcheck', { methods: GET, handle: healthcheck }],
    ['/json', { methods: ['POST'], handle: json }],
    [
      '/metrics',
      { methods: GET, handle: async () => ({ status: 200, ...(await options.metrics()) }) },
    ],
    ['/rlconfig', { methods: GET, handle: rlconfig }],
  ]);

  function healthcheck(): HttpReply {
    const { serving, reason } = options.health();
    return text(serving ? 200 : 500, reason);
  }

  function rlconfig(): HttpReply {
    return text(
      200,
      options
        .rules()
        .map((line) => `${line}\n`)
        .join(''),
    );
  }

  async function route(request: http.IncomingMessage): Promise<HttpReply> {
    const path = (request.url ?? '/').split('?', 1)[0] ?? '/';
    const found = routes.get(path);
    if (found === undefined) return text(404, `no such path: ${path}`);
    if (!found.methods.includes(request.method ?? '')) {
      const allow = found.methods.join(', ');
      return { ...text(405, `${path} allows ${allow}`), headers: { Allow: allow } };
    }
    try {
      return await found.handle(request);
    } catch (error) {
      return fail(error);
    }
  }

  let closing = false;
  const send = (response: http.ServerResponse, reply: HttpReply): void => {
    response.writeHead(reply.status, {
      ...reply.headers,
      'Content-Type': reply.contentType,
      'Content-Length': Buffer.byteLength(reply.body),
      // Keep-alive would hold a connection open past close(); a refused body is left unread.
      ...(closing || reply.close ? { Connection: 'close' } : {}),
    });
    response.end(reply.body);
  };

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
    (request, response) => {
      route(request)
        .then((reply) => send(response, reply))
        .catch((error: unknown) => {
          // E.g. a content type from metrics() that is not a valid header value.
          if (response.headersSent) response.destroy();
          else send(response, fail(error));
        })
        .catch(() => response.destroy());
    },
  );
  if (bounds !== undefined) {
    // Past it, Node closes an accepted connection before reading from it.
    server.maxConnections = bounds.maxConnections;
    server.on('drop', () => options.onConnectionRefused?.());
  }
  // After listen: errors of the listening socket itself, which must not crash the process.
  server.on('error', (error) => server.listening && options.onInternalError?.(error));

  return {
    listen: (host, port) =>
      new Promise((resolve, reject) => {
        server.once('error', reject);
        server.listen(port, host, () => {
          server.off('error', reject);
          resolve((server.address() as AddressInfo).port);
        });
      }),

    close: (graceMs) =>
      new Promise((resolve) => {
        closing = true;
        if (!server.listening) return resolve();
        const timer = setTimeout(() => server.closeAllConnections(), graceMs);
        // Node 20's close() also ends idle keep-alive connections at once.
        server.close(() => {
          clearTimeout(timer);
          resolve();
        });
      }),
  };
}
