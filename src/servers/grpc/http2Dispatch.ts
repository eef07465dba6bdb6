/**
 * The seam between grpc-js and the HTTP/2 server under it. grpc-js gives no public hook to its
 * HTTP/2 servers, so this wraps the server's (private) `createHttp2Server`, which every bound
 * address goes through, and replaces grpc-js's own `'stream'` listener with a dispatch: streams
 * whose `:path` has a handler of its own (the fast path) never reach grpc-js, and every other
 * stream goes to grpc-js as before. Each created server is also handed to `configure` (the
 * guard's connection bounds).
 *
 * Start-up fails, rather than serving without the fast path or the bounds, when grpc-js's layout
 * has changed: no `createHttp2Server`, or not exactly one `'stream'` listener of its own.
 */
import type http2 from 'node:http2';
import type * as grpc from '@grpc/grpc-js';
import type { Http2Server } from './guard.js';

export type StreamHandler = (
  stream: http2.ServerHttp2Stream,
  headers: http2.IncomingHttpHeaders,
) => void;

export interface DispatchOptions {
  /** Streams for these paths are served here instead of by grpc-js. */
  handlers: ReadonlyMap<string, StreamHandler>;
  /** Told of each stream that grpc-js serves, after grpc-js has taken it. */
  onGrpcJsStream?(stream: http2.ServerHttp2Stream, path: string | undefined): void;
  /** Told of each stream, before it is routed. */
  onStream?(stream: http2.ServerHttp2Stream): void;
  /** Told of each HTTP/2 server, before it listens. */
  configure?(http2Server: Http2Server): void;
}

type GrpcJsListener = (
  stream: http2.ServerHttp2Stream,
  headers: http2.IncomingHttpHeaders,
  flags: number,
  rawHeaders: string[],
) => void;
type ServerInternals = { createHttp2Server?: (credentials: unknown) => Http2Server };

export function dispatchStreams(server: grpc.Server, options: DispatchOptions): void {
  const internals = server as unknown as ServerInternals;
  const create = internals.createHttp2Server;
  if (typeof create !== 'function') {
    throw new Error(
      'grpc-js has no createHttp2Server: the gRPC server bounds and fast path cannot be applied',
    );
  }
  const { handlers, onGrpcJsStream, onStream } = options;
  internals.createHttp2Server = function (this: unknown, credentials: unknown): Http2Server {
    const http2Server = create.call(this, credentials);
    options.configure?.(http2Server);
    const listeners = http2Server.listeners('stream') as GrpcJsListener[];
    const grpcJs = listeners[0];
    if (listeners.length !== 1 || grpcJs === undefined) {
      throw new Error(
        `grpc-js's HTTP/2 server has ${listeners.length} 'stream' listeners, not 1: the fast path cannot route around it`,
      );
    }
    http2Server.removeListener('stream', grpcJs);
    const dispatch: GrpcJsListener = (stream, headers, flags, rawHeaders) => {
      onStream?.(stream);
      const path = headers[':path'];
      const handler = path === undefined ? undefined : handlers.get(path);
      if (handler !== undefined) return handler(stream, headers);
      grpcJs.call(http2Server, stream, headers, flags, rawHeaders);
      onGrpcJsStream?.(stream, path);
    };
    http2Server.on('stream', dispatch);
    return http2Server;
  };
}
