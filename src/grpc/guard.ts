/**
 * Bounds on what gRPC clients can hold in this process, which grpc-js does not set by itself:
 * connections, calls, bytes of requests still arriving, the time a call may stay open, and the
 * size of a call's headers; and the maximum connection age, kept here rather than by grpc-js.
 *
 * The guard sees every HTTP/2 server grpc-js creates, and every stream on it, through the
 * dispatch in http2Dispatch.ts: it listens to the streams that grpc-js serves (`watch`), and the
 * fast path reports its own (`admit`, `receive`, `arrived`, `release`), so both paths share one
 * count of calls and one budget of bytes.
 *
 * What one client can cost, with the defaults, is in docs/operations.md ("gRPC server"). Each bound, once
 * reached, refuses only new work: a connection past the cap is closed as it is accepted, a call
 * past the cap or over the byte budget is reset (RST_STREAM REFUSED_STREAM or ENHANCE_YOUR_CALM),
 * and a call open past its time is reset (RST_STREAM CANCEL). The path serving it then sees the
 * call cancelled.
 *
 * The maximum idle time: a connection that has had no call open for that long is sent GOAWAY and
 * closed, as grpc-go's MaxConnectionIdle does. It counts the calls of both paths, which grpc-js's
 * own idle timer (`grpc.max_connection_idle_ms`) cannot: that one sees only grpc-js's calls, and
 * would close connections that carry only fast-path calls.
 *
 * The maximum connection age: grpc-js arms one timer per connection with a random length, and
 * Node keeps an unreferenced timer's list until its time comes, even once the connection closed
 * and the timer was cleared: at the default of 24 hours, every closed connection would leave one
 * behind for a day. One sweep every second ages every connection and times every call instead.
 */
import http2 from 'node:http2';

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
  /** A connection with no call open for this long is sent GOAWAY and closed; Infinity: never. */
  maxConnectionIdleMs: number;
  /** Told each time a bound refuses or ends something, by the bound's name. */
  onBound?(bound: GuardBound): void;
  /** The guard's clock, in ms; monotonic by default. */
  now?(): number;
}

export type GuardBound =
  | 'connections'
  | 'calls'
  | 'receiving_bytes'
  | 'call_timeout'
  | 'connection_age'
  | 'connection_idle';

export interface Guard {
  /** Applies the connection bounds to one of grpc-js's HTTP/2 servers, as it is created. */
  configure(http2Server: Http2Server): void;
  /** Bounds a call that grpc-js serves, by listening to its stream. */
  watch(stream: http2.ServerHttp2Stream): void;
  /**
   * Admits a call that the fast path serves, which reports its bytes itself (`receive`,
   * `arrived`, `release`) so that the stream carries no listener of the guard's. Undefined: the
   * call is over the bound, and its stream was reset.
   */
  admit(stream: http2.ServerHttp2Stream): GuardedCall | undefined;
  /** Counts bytes of the call's request; false when they are over the budget: it was reset. */
  receive(stream: http2.ServerHttp2Stream, call: GuardedCall, bytes: number): boolean;
  /** The call's request has fully arrived, or will not: its bytes leave the budget. */
  arrived(call: GuardedCall): void;
  /** The call's stream closed. */
  release(stream: http2.ServerHttp2Stream, call: GuardedCall): void;
  /** Stops the sweep. */
  close(): void;
}

export interface GuardedCall {
  openedAt: number;
  /** Bytes of its request received so far; 0 once the request has fully arrived. */
  receiving: number;
  /** The connection it counts in as open; undefined once it no longer does. */
  connection: Connection | undefined;
}

interface Connection {
  /** When it is sent GOAWAY. */
  ageDeadline: number;
  /** When it is closed regardless, once it was sent GOAWAY. */
  closeDeadline: number;
  /** Calls open on it now, on either path. */
  openCalls: number;
  /** When its last call ended, or when it connected. */
  idleSince: number;
}

export type Http2Server = http2.Http2Server | http2.Http2SecureServer;

export function createGuard(options: GuardOptions): Guard {
  const now = options.now ?? (() => performance.now());
  const bound = (name: GuardBound) => options.onBound?.(name);
  // Insertion-ordered, so the oldest call is first: the sweep stops at the first one in time.
  const calls = new Map<http2.ServerHttp2Stream, GuardedCall>();
  const connections = new Map<http2.Http2Session, Connection>();
  let receivingBytes = 0;

  const reset = (stream: http2.ServerHttp2Stream, code: number) => {
    if (!stream.destroyed) stream.close(code);
  };

  const admit = (stream: http2.ServerHttp2Stream): GuardedCall | undefined => {
    if (calls.size >= options.maxCalls) {
      bound('calls');
      reset(stream, http2.constants.NGHTTP2_REFUSED_STREAM);
      return undefined;
    }
    const connection = stream.session ? connections.get(stream.session) : undefined;
    if (connection !== undefined) connection.openCalls += 1;
    const call: GuardedCall = { openedAt: now(), receiving: 0, connection };
    calls.set(stream, call);
    return call;
  };
  /** The call no longer counts as open on its connection: it closed, or timed out. */
  const leave = (call: GuardedCall) => {
    const { connection } = call;
    if (connection === undefined) return;
    call.connection = undefined;
    connection.openCalls -= 1;
    if (connection.openCalls === 0) connection.idleSince = now();
  };
  const arrived = (call: GuardedCall) => {
    receivingBytes -= call.receiving;
    call.receiving = 0;
  };
  const receive = (stream: http2.ServerHttp2Stream, call: GuardedCall, bytes: number) => {
    call.receiving += bytes;
    receivingBytes += bytes;
    if (receivingBytes <= options.maxReceivingBytes) return true;
    arrived(call);
    bound('receiving_bytes');
    reset(stream, http2.constants.NGHTTP2_ENHANCE_YOUR_CALM);
    return false;
  };
  const release = (stream: http2.ServerHttp2Stream, call: GuardedCall) => {
    arrived(call);
    leave(call);
    calls.delete(stream);
  };

  const watch = (stream: http2.ServerHttp2Stream) => {
    const call = admit(stream);
    if (call === undefined) return;
    const onData = (chunk: Buffer) => {
      if (!receive(stream, call, chunk.length)) stream.off('data', onData);
    };
    // Listening adds no flow: grpc-js already reads the stream and pauses it between messages.
    stream.on('data', onData);
    stream.once('end', () => {
      arrived(call);
      stream.off('data', onData);
    });
    stream.once('close', () => release(stream, call));
  };

  const onSession = (session: http2.ServerHttp2Session) => {
    const jitter = 1 + (Math.random() * 0.2 - 0.1);
    const at = now();
    const ageDeadline = at + options.maxConnectionAgeMs * jitter;
    connections.set(session, { ageDeadline, closeDeadline: Infinity, openCalls: 0, idleSince: at });
    session.once('close', () => connections.delete(session));
  };

  const configure = (http2Server: Http2Server) => {
    // Past it, Node closes an accepted connection before anything reads from it.
    http2Server.maxConnections = options.maxConnections;
    http2Server.on('drop', () => bound('connections'));
    http2Server.updateSettings({ maxHeaderListSize: options.maxHeaderListBytes });
    http2Server.on('session', onSession);
  };

  const sweep = () => {
    const at = now();
    for (const [stream, call] of calls) {
      if (at - call.openedAt < options.callTimeoutMs) break;
      bound('call_timeout');
      calls.delete(stream);
      leave(call);
      reset(stream, http2.constants.NGHTTP2_CANCEL);
    }
    if (options.maxConnectionAgeMs === Infinity && options.maxConnectionIdleMs === Infinity) return;
    for (const [session, connection] of connections) {
      if (at >= connection.closeDeadline) {
        connections.delete(session);
        session.destroy();
      } else if (connection.closeDeadline !== Infinity) {
        continue; // sent GOAWAY already
      } else if (at >= connection.ageDeadline) {
        bound('connection_age');
        connection.closeDeadline = at + options.maxConnectionAgeGraceMs;
        goAway(session, 'max_age');
      } else if (
        connection.openCalls === 0 &&
        at - connection.idleSince >= options.maxConnectionIdleMs
      ) {
        bound('connection_idle');
        // No call is open: the close is at once, unless one raced the GOAWAY in.
        connection.closeDeadline = at + options.maxConnectionAgeGraceMs;
        goAway(session, 'max_idle');
      }
    }
  };
  // Every second, or finer for short bounds (tests): a bound is kept within a quarter of itself.
  const interval = Math.max(
    10,
    Math.min(
      1_000,
      options.callTimeoutMs / 4,
      options.maxConnectionAgeMs / 4,
      options.maxConnectionIdleMs / 4,
    ),
  );
  const timer = setInterval(sweep, interval);
  timer.unref();

  return { configure, watch, admit, receive, arrived, release, close: () => clearInterval(timer) };
}

/**
 * As gRPC servers end an old connection: a GOAWAY that lets the client finish its calls and open
 * no more, then the session closes once they are done.
 */
function goAway(session: http2.Http2Session, reason: string): void {
  try {
    session.goaway(http2.constants.NGHTTP2_NO_ERROR, 2 ** 31 - 1, Buffer.from(reason));
    session.close();
  } catch {
    session.destroy();
  }
}
