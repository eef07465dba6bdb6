import type { Socket } from 'node:net';
import type { Redis } from 'ioredis';
import { SettingsError, StoreError } from '../core/errors.js';
import { explainConnectionError, selectRefused } from './connectionErrors.js';
import { classifyRedisError as classify } from './redisErrors.js';

/**
 * Watches each connection of a single Redis (or Sentinel's master) as ioredis opens it, for two
 * things its events alone do not tell:
 *
 * - **A database that cannot be selected.** ioredis sends SELECT when it connects, and when that
 *   fails it only emits an error and carries on in database 0, where every counter would then go.
 *   Here no call is sent on that connection, and it is dropped; ioredis connects again
 *   (every second meanwhile), and the database is used as soon as SELECT works again.
 * - **TLS mistakes,** which reach ioredis as a timeout or a reset connection. What happened on the
 *   socket (connected, handshake done, anything received) names them (see connectionErrors.ts).
 */
export interface ConnectionWatch {
  /** A connection error as the StoreError calls report, named for the mistake when it is one. */
  explain(error: Error): StoreError;
  /** Why no call may be sent now: the connection's SELECT failed. Undefined when calls may go. */
  refusal(): StoreError | undefined;
  /** The last connection's SELECT failed: the next attempt waits a second. */
  selectFailing(): boolean;
  /**
   * Waits for the first connection (at most `timeoutMs`) and rejects with a SettingsError naming
   * REDIS_URL's database when its SELECT failed. Any other outcome resolves: a Redis that is down
   * at start-up is health's business.
   */
  firstConnection(timeoutMs: number): Promise<void>;
}

export interface WatchOptions {
  db: number;
  tls: boolean;
  caCert: boolean;
  clientCert: boolean;
  /** host:port or the socket's path from REDIS_URL, for errors before a connection is made. */
  address: string;
}

interface SocketState {
  address: string;
  connected: boolean;
  secure: boolean;
  readonly received: boolean;
}

export function watchConnection(redis: Redis, options: WatchOptions): ConnectionWatch {
  const sockets = new WeakMap<object, SocketState>();
  let refusedOn: object | undefined;
  let refused: StoreError | undefined;
  let failing = false;
  onEachSocket(redis, (socket) => sockets.set(socket, followSocket(socket, options.address)));
  redis.on('ready', () => {
    failing = redis.stream === refusedOn;
    // Dropped once ioredis calls it ready, as any lost connection: dropped any earlier, ioredis
    // would still call it ready after it had begun to reconnect, and never reconnect.
    if (failing) redis.stream.destroy();
  });
  redis.on('error', (error: Error & { command?: { name?: string } }) => {
    if (error.command?.name !== 'select' || redis.stream === undefined) return;
    const text = selectRefused(options.db, error);
    const kind = /^NOPERM\b/.test(error.message) ? 'permission' : 'script';
    refused = new StoreError(`redis: ${text}`, kind, { cause: error });
    // From here no call is sent on this connection (see refusal()).
    refusedOn = redis.stream;
    failing = true;
  });
  return {
    explain(error) {
      if ((error as { command?: { name?: string } }).command?.name === 'select' && refused) {
        return refused;
      }
      const state = redis.stream ? sockets.get(redis.stream) : undefined;
      const text = explainConnectionError(error, {
        tls: options.tls,
        caCert: options.caCert,
        clientCert: options.clientCert,
        address: state?.address ?? options.address,
        connected: state?.connected ?? false,
        secure: state?.secure ?? false,
        received: state?.received ?? false,
      });
      return text === undefined
        ? classify(error)
        : new StoreError(`redis: not connected: ${text}`, 'connection', { cause: error });
    },
    refusal: () => (redis.stream !== undefined && redis.stream === refusedOn ? refused : undefined),
    selectFailing: () => failing,
    firstConnection: (timeoutMs) => firstConnection(redis, timeoutMs, () => refused),
  };
}

/**
 * What happens on one socket, kept for naming its failure. Nothing here reads from the socket: a
 * listener for its data would make it read sooner, and change which error it fails with.
 */
function followSocket(socket: Socket, configured: string): SocketState {
  const state = {
    address: configured,
    connected: false,
    secure: false,
    // Bytes of replies (after TLS, of cleartext): none means the server answered nothing.
    get received() {
      return socket.bytesRead > 0;
    },
  };
  const connected = () => {
    state.connected = true;
    if (socket.remoteAddress !== undefined) {
      state.address = `${socket.remoteAddress}:${socket.remotePort}`;
    }
  };
  if (socket.connecting) socket.once('connect', connected);
  else connected();
  socket.once('secureConnect', () => (state.secure = true));
  // ioredis hears a socket's first error only: a second one (a TLS alert read after a reset)
  // would otherwise be an unhandled 'error' event, which ends the process.
  socket.on('error', () => undefined);
  return state;
}

/**
 * ioredis opens each connection through its connector, which it does not expose: its `connect`
 * is wrapped on this one client, so that each new socket is seen before ioredis uses it.
 */
function onEachSocket(redis: Redis, seen: (socket: Socket) => void): void {
  const connector = (redis as unknown as { connector: { connect(...args: unknown[]): unknown } })
    .connector;
  const connect = connector.connect.bind(connector) as (...args: unknown[]) => Promise<Socket>;
  connector.connect = (...args: unknown[]) =>
    connect(...args).then((socket) => {
      seen(socket);
      return socket;
    });
}

function firstConnection(
  redis: Redis,
  timeoutMs: number,
  refused: () => StoreError | undefined,
): Promise<void> {
  return new Promise((resolve, reject) => {
    // The rules may have taken long enough (xDS) for the connection to be ready, or refused,
    // before anyone asked: no event would come then.
    const settled = refused();
    if (settled) return reject(new SettingsError(settled.message.replace(/^redis: /, '')));
    if (redis.status === 'ready') return resolve();
    const done = () => {
      clearTimeout(timer);
      redis.off('ready', done);
      redis.off('error', done);
      const problem = refused();
      if (problem) reject(new SettingsError(problem.message.replace(/^redis: /, '')));
      else resolve();
    };
    const timer = setTimeout(done, timeoutMs);
    redis.once('ready', done);
    redis.once('error', done);
  });
}
