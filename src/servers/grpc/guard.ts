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
import { createMessageFraming } from './messageFraming.js';
import { refuseStream } from './peerResets.js';

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
   * Counts a long-lived stream (RLQS) as open on its connection, so the idle bound leaves the
   * connection alone, without the call timeout or the call count, which would end it: such
   * streams carry bounds of their own. The bytes of a message of it still arriving count in the
   * byte budget, as a short call's request does, and leave it once the message has arrived. The
   * connection's age still ends it.
   */
  hold(stream: http2.ServerHttp2Stream): void;
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
  const connections = createConnectionBook(options, now);
  const calls = createCallCount(options, now, bound, connections);
  const timer = setInterval(() => {
    const at = now();
    calls.timeOut(at);
    sweepConnections(connections.open, at, options, bound);
  }, sweepInterval(options));
  timer.unref();

  return {
    configure: (http2Server) => applyConnectionBounds(http2Server, options, bound, connections),
    watch: (stream) => watchStream(calls, stream),
    hold(stream) {
      const held: GuardedCall = {
        openedAt: now(),
        receiving: 0,
        connection: connections.join(stream),
      };
      budgetMessages(calls, stream, held);
      stream.once('close', () => {
        calls.arrived(held);
        connections.leave(held);
      });
    },
    admit: calls.admit,
    receive: calls.receive,
    arrived: calls.arrived,
    release: calls.release,
    close: () => clearInterval(timer),
  };
}

/** Each connection's deadlines and the calls open on it, on either path. */
interface ConnectionBook {
  /** By session, from its start until it closes or the sweep destroys it. */
  readonly open: Map<http2.Http2Session, Connection>;
  /** Counts a connection from its start until it closes. */
  track(session: http2.ServerHttp2Session): void;
  /** A call opened: the connection of its stream, now counting it; undefined if not tracked. */
  join(stream: http2.ServerHttp2Stream): Connection | undefined;
  /** The call no longer counts as open on its connection: it closed, or timed out. */
  leave(call: GuardedCall): void;
}

function createConnectionBook(
  limits: Pick<GuardOptions, 'maxConnectionAgeMs'>,
  now: () => number,
): ConnectionBook {
  const open = new Map<http2.Http2Session, Connection>();
  return {
    open,
    track(session) {
      const jitter = 1 + (Math.random() * 0.2 - 0.1);
      const at = now();
      const ageDeadline = at + limits.maxConnectionAgeMs * jitter;
      open.set(session, { ageDeadline, closeDeadline: Infinity, openCalls: 0, idleSince: at });
      session.once('close', () => open.delete(session));
    },
    join(stream) {
      const connection = stream.session ? open.get(stream.session) : undefined;
      if (connection !== undefined) connection.openCalls += 1;
      return connection;
    },
    leave(call) {
      const { connection } = call;
      if (connection === undefined) return;
      call.connection = undefined;
      connection.openCalls -= 1;
      if (connection.openCalls === 0) connection.idleSince = now();
    },
  };
}

/** The calls open, across connections and paths, and the bytes of their requests still arriving. */
interface CallCount extends Pick<Guard, 'admit' | 'receive' | 'arrived' | 'release'> {
  /** Resets the calls open for longer than the call timeout at `at`. */
  timeOut(at: number): void;
}

function createCallCount(
  limits: Pick<GuardOptions, 'maxCalls' | 'maxReceivingBytes' | 'callTimeoutMs'>,
  now: () => number,
  bound: (name: GuardBound) => void,
  connections: ConnectionBook,
): CallCount {
  // Insertion-ordered, so the oldest call is first: the sweep stops at the first one in time.
  const calls = new Map<http2.ServerHttp2Stream, GuardedCall>();
  let receivingBytes = 0;

  const arrived = (call: GuardedCall) => {
    receivingBytes -= call.receiving;
    call.receiving = 0;
  };
  return {
    admit(stream) {
      if (calls.size >= limits.maxCalls) {
        bound('calls');
        reset(stream, http2.constants.NGHTTP2_REFUSED_STREAM);
        return undefined;
      }
      const connection = connections.join(stream);
      const call: GuardedCall = { openedAt: now(), receiving: 0, connection };
      calls.set(stream, call);
      return call;
    },
    receive(stream, call, bytes) {
      call.receiving += bytes;
      receivingBytes += bytes;
      if (receivingBytes <= limits.maxReceivingBytes) return true;
      arrived(call);
      bound('receiving_bytes');
      reset(stream, http2.constants.NGHTTP2_ENHANCE_YOUR_CALM);
      return false;
    },
    arrived,
    release(stream, call) {
      arrived(call);
      connections.leave(call);
      calls.delete(stream);
    },
    timeOut(at) {
      for (const [stream, call] of calls) {
        if (at - call.openedAt < limits.callTimeoutMs) break;
        bound('call_timeout');
        calls.delete(stream);
        connections.leave(call);
        reset(stream, http2.constants.NGHTTP2_CANCEL);
      }
    },
  };
}

/** Bounds a call that grpc-js serves: its stream's own events report its bytes and its close. */
function watchStream(calls: CallCount, stream: http2.ServerHttp2Stream): void {
  const call = calls.admit(stream);
  if (call === undefined) return;
  const onData = (chunk: Buffer) => {
    if (!calls.receive(stream, call, chunk.length)) stream.off('data', onData);
  };
  // Listening adds no flow: grpc-js already reads the stream and pauses it between messages.
  stream.on('data', onData);
  stream.once('end', () => {
    calls.arrived(call);
    stream.off('data', onData);
  });
  stream.once('close', () => calls.release(stream, call));
}

/**
 * Counts the bytes of a long-lived stream's message still arriving, message by message: a stream
 * that holds a message unfinished holds its bytes, which grpc-js buffers until it is whole.
 */
function budgetMessages(
  calls: CallCount,
  stream: http2.ServerHttp2Stream,
  call: GuardedCall,
): void {
  const framing = createMessageFraming();
  const onData = (chunk: Buffer) => {
    const unfinished = framing.add(chunk);
    calls.arrived(call);
    if (unfinished > 0 && !calls.receive(stream, call, unfinished)) stream.off('data', onData);
  };
  stream.on('data', onData);
  stream.once('end', () => {
    calls.arrived(call);
    stream.off('data', onData);
  });
}

function applyConnectionBounds(
  http2Server: Http2Server,
  limits: Pick<GuardOptions, 'maxConnections' | 'maxHeaderListBytes'>,
  bound: (name: GuardBound) => void,
  connections: ConnectionBook,
): void {
  // Past it, Node closes an accepted connection before anything reads from it.
  http2Server.maxConnections = limits.maxConnections;
  http2Server.on('drop', () => bound('connections'));
  http2Server.updateSettings({ maxHeaderListSize: limits.maxHeaderListBytes });
  http2Server.on('session', connections.track);
}

/**
 * The age and idle bounds: sends GOAWAY to each connection past its age or idle with no call open
 * past the idle time, and closes each still open past its grace.
 */
function sweepConnections(
  connections: Map<http2.Http2Session, Connection>,
  at: number,
  limits: Pick<
    GuardOptions,
    'maxConnectionAgeMs' | 'maxConnectionAgeGraceMs' | 'maxConnectionIdleMs'
  >,
  bound: (name: GuardBound) => void,
): void {
  if (limits.maxConnectionAgeMs === Infinity && limits.maxConnectionIdleMs === Infinity) return;
  for (const [session, connection] of connections) {
    if (at >= connection.closeDeadline) {
      connections.delete(session);
      session.destroy();
    } else if (connection.closeDeadline !== Infinity) {
      continue; // sent GOAWAY already
    } else if (at >= connection.ageDeadline) {
      bound('connection_age');
      connection.closeDeadline = at + limits.maxConnectionAgeGraceMs;
      goAway(session, 'max_age');
    } else if (
      connection.openCalls === 0 &&
      at - connection.idleSince >= limits.maxConnectionIdleMs
    ) {
      bound('connection_idle');
      // No call is open: the close is at once, unless one raced the GOAWAY in.
      connection.closeDeadline = at + limits.maxConnectionAgeGraceMs;
      goAway(session, 'max_idle');
    }
  }
}

/** Every second, or finer for short bounds (tests): a bound is kept within a quarter of itself. */
function sweepInterval(
  limits: Pick<GuardOptions, 'callTimeoutMs' | 'maxConnectionAgeMs' | 'maxConnectionIdleMs'>,
): number {
  return Math.max(
    10,
    Math.min(
      1_000,
      limits.callTimeoutMs / 4,
      limits.maxConnectionAgeMs / 4,
      limits.maxConnectionIdleMs / 4,
    ),
  );
}

function reset(stream: http2.ServerHttp2Stream, code: number): void {
  if (!stream.destroyed) refuseStream(stream, code);
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
