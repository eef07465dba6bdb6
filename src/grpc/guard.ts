/**
 * Bounds on what gRPC clients can hold in this process, which grpc-js does not set by itself:
 * connections, calls, bytes of requests still arriving, the time a call may stay open, and the
 * size of a call's headers; and the maximum connection age, kept here rather than by grpc-js.
 *
 * grpc-js gives no public hook to its HTTP/2 sessions and streams, so the guard wraps the
 * server's (private) `createHttp2Server`, which every bound address goes through, and listens to
 * the Node HTTP/2 server it returns. `guardServer` throws if that method is missing, so that a
 * grpc-js that changed it fails at start-up rather than serving without bounds.
 *
 * What one client can cost, with the defaults, is in docs/operations.md ("gRPC server"). Each bound, once
 * reached, refuses only new work: a connection past the cap is closed as it is accepted, a call
 * past the cap or over the byte budget is reset (RST_STREAM REFUSED_STREAM or ENHANCE_YOUR_CALM),
 * and a call open past its time is reset (RST_STREAM CANCEL). grpc-js then sees the call cancelled.
 *
 * The maximum connection age: grpc-js arms one timer per connection with a random length, and
 * Node keeps an unreferenced timer's list until its time comes, even once the connection closed
 * and the timer was cleared: at the default of 24 hours, every closed connection would leave one
 * behind for a day. One sweep every second ages every connection and times every call instead.
 */
import http2 from 'node:http2';
import type * as grpc from '@grpc/grpc-js';

export interface GuardOptions {
  /** Connections at once, per listening address. */
  maxConnections: number;
  /** Calls open at once, across connections. */
  maxCalls: number;
  /** Bytes of requests still arriving, across calls. */
  maxReceivingBytes: number;
  /** How long a call may stay open, from its headers to its last byte. */
  callTimeoutMs: number;
  /** The size of a call's header list (HTTP/2 SETTINGS_MAX_HEADER_LIST_SIZE). */
  maxHeaderListBytes: number;
  /** A connection is sent GOAWAY after this age, with up to 10% of jitter; Infinity: never. */
  maxConnectionAgeMs: number;
  /** ...and closed this long after its GOAWAY, calls in flight or not. */
  maxConnectionAgeGraceMs: number;
  /** Told each time a bound refuses or ends something, by the bound's name. */
  onBound?(bound: GuardBound): void;
  /** The guard's clock, in ms; monotonic by default. */
  now?(): number;
}

export type GuardBound =
  'connections' | 'calls' | 'receiving_bytes' | 'call_timeout' | 'connection_age';

export interface Guard {
  /** Stops the sweep. */
  close(): void;
}

interface Call {
  openedAt: number;
  /** Bytes of its request received so far; 0 once the request has fully arrived. */
  receiving: number;
}

interface Connection {
  /** When it is sent GOAWAY. */
  ageDeadline: number;
  /** When it is closed regardless, once it was sent GOAWAY. */
  closeDeadline: number;
}

type Http2Server = http2.Http2Server | http2.Http2SecureServer;
type ServerInternals = { createHttp2Server?: (credentials: unknown) => Http2Server };

export function guardServer(server: grpc.Server, options: GuardOptions): Guard {
  const internals = server as unknown as ServerInternals;
  const create = internals.createHttp2Server;
  if (typeof create !== 'function') {
    throw new Error('grpc-js has no createHttp2Server: the gRPC server bounds cannot be applied');
  }
  const now = options.now ?? (() => performance.now());
  const bound = (name: GuardBound) => options.onBound?.(name);
  // Insertion-ordered, so the oldest call is first: the sweep stops at the first one in time.
  const calls = new Map<http2.ServerHttp2Stream, Call>();
  const connections = new Map<http2.ServerHttp2Session, Connection>();
  let receivingBytes = 0;

  const reset = (stream: http2.ServerHttp2Stream, code: number) => {
    if (!stream.destroyed) stream.close(code);
  };

  const onStream = (stream: http2.ServerHttp2Stream) => {
    if (calls.size >= options.maxCalls) {
      bound('calls');
      return reset(stream, http2.constants.NGHTTP2_REFUSED_STREAM);
    }
    const call: Call = { openedAt: now(), receiving: 0 };
    calls.set(stream, call);
    const arrived = () => {
      receivingBytes -= call.receiving;
      call.receiving = 0;
      stream.off('data', onData);
    };
    const onData = (chunk: Buffer) => {
      call.receiving += chunk.length;
      receivingBytes += chunk.length;
      if (receivingBytes > options.maxReceivingBytes) {
        arrived();
        bound('receiving_bytes');
        reset(stream, http2.constants.NGHTTP2_ENHANCE_YOUR_CALM);
      }
    };
    // Listening adds no flow: grpc-js already reads the stream and pauses it between messages.
    stream.on('data', onData);
    stream.once('end', arrived);
    stream.once('close', () => {
      arrived();
      calls.delete(stream);
    });
  };

  const onSession = (session: http2.ServerHttp2Session) => {
    const jitter = 1 + (Math.random() * 0.2 - 0.1);
    const ageDeadline = now() + options.maxConnectionAgeMs * jitter;
    connections.set(session, { ageDeadline, closeDeadline: Infinity });
    session.once('close', () => connections.delete(session));
  };

  internals.createHttp2Server = function (this: unknown, credentials: unknown): Http2Server {
    const http2Server = create.call(this, credentials);
    // Past it, Node closes an accepted connection before anything reads from it.
    http2Server.maxConnections = options.maxConnections;
    http2Server.on('drop', () => bound('connections'));
    http2Server.updateSettings({ maxHeaderListSize: options.maxHeaderListBytes });
    http2Server.on('session', onSession);
    // After grpc-js's own listener: the call exists, and sees a reset as a cancellation.
    http2Server.on('stream', onStream);
    return http2Server;
  };

  const sweep = () => {
    const at = now();
    for (const [stream, call] of calls) {
      if (at - call.openedAt < options.callTimeoutMs) break;
      bound('call_timeout');
      calls.delete(stream);
      reset(stream, http2.constants.NGHTTP2_CANCEL);
    }
    if (options.maxConnectionAgeMs === Infinity) return;
    for (const [session, connection] of connections) {
      if (at >= connection.closeDeadline) {
        connections.delete(session);
        session.destroy();
      } else if (at >= connection.ageDeadline && connection.closeDeadline === Infinity) {
        bound('connection_age');
        connection.closeDeadline = at + options.maxConnectionAgeGraceMs;
        goAway(session);
      }
    }
  };
  // Every second, or finer for short bounds (tests): a bound is kept within a quarter of itself.
  const interval = Math.max(
    10,
    Math.min(1_000, options.callTimeoutMs / 4, options.maxConnectionAgeMs / 4),
  );
  const timer = setInterval(sweep, interval);
  timer.unref();

  return { close: () => clearInterval(timer) };
}

/**
 * As gRPC servers end an old connection: a GOAWAY that lets the client finish its calls and open
 * no more, then the session closes once they are done.
 */
function goAway(session: http2.ServerHttp2Session): void {
  try {
    session.goaway(http2.constants.NGHTTP2_NO_ERROR, 2 ** 31 - 1, Buffer.from('max_age'));
    session.close();
  } catch {
    session.destroy();
  }
}
