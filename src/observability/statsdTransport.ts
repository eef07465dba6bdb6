/**
 * The socket under the statsd sink: packets of lines to a statsd server over TCP or UDP, with no
 * wait on the serving thread and a bound on what waits for the socket.
 *
 * TCP connects at once and, whenever the connection fails or closes, again after a backoff that
 * doubles from 100 ms to at most 2 s, so that a server that restarts, starts late or was
 * unreachable gets lines again within about 2 s of accepting. (hot-shots, used before, reconnected
 * once and then never again when that attempt failed.) While a connection is being made, packets
 * wait in its socket; while there is none (between attempts), they are dropped, not queued. A server that stops reading holds at most MAX_BACKLOG_BYTES in the
 * socket; past that, packets are dropped until it reads again, and a connection that moved no
 * byte for STALL_MS while packets waited is replaced.
 *
 * UDP sends each packet on its own, unconnected, so that no ICMP error ever closes it; at most
 * MAX_UDP_PENDING sends wait for the kernel.
 *
 * Both send to the address that STATSD_HOST resolved to (statsdAddress.ts): a name is looked up
 * once, not for each packet or connection. While it has not resolved, packets are dropped.
 */
import { createSocket, type Socket as UdpSocket } from 'node:dgram';
import { lookup as dnsLookup } from 'node:dns';
import { connect, type Socket } from 'node:net';
import { createStatsdAddress, type Lookup, type StatsdAddress } from './statsdAddress.js';

export interface StatsdTransport {
  /** Hands one packet to the socket; false when it was dropped instead. */
  send(packet: string): boolean;
  close(): Promise<void>;
}

export interface TransportOptions {
  host: string;
  port: number;
  /**
   * A socket error, a refused connection or a name that does not resolve, say; the caller
   * rate-limits its own reporting.
   */
  onError(error: Error): void;
  /** A packet that `send` took was lost after all: its UDP send failed. */
  onLost?(): void;
  /** How STATSD_HOST is looked up; node:dns's `lookup` by default. */
  lookup?: Lookup;
}

const MAX_BACKLOG_BYTES = 256 * 1024;
const MAX_UDP_PENDING = 64;
const FIRST_RETRY_MS = 100;
const MAX_RETRY_MS = 2_000;
const STALL_MS = 15_000;
/** How long a close waits for the last packets to leave. */
const CLOSE_MS = 500;

function addressOf(options: TransportOptions, onResolved?: () => void): StatsdAddress {
  return createStatsdAddress({
    host: options.host,
    lookup: options.lookup ?? dnsLookup,
    onError: options.onError,
    onResolved,
  });
}

export function createTcpTransport(options: TransportOptions): StatsdTransport {
  const state: TcpState = {
    options,
    // Connects at once when the name resolves, not at the next retry.
    address: addressOf(options, () => {
      if (state.socket !== undefined || state.closed) return;
      clearTimeout(state.retry);
      open(state);
    }),
    socket: undefined,
    connected: false,
    closed: false,
    retryMs: FIRST_RETRY_MS,
    retry: undefined,
    stalledSince: undefined,
    bytesAtStall: 0,
  };
  open(state);
  return {
    send: (packet) => sendTcp(state, packet),
    close: () => closeTcp(state),
  };
}

interface TcpState {
  readonly options: TransportOptions;
  readonly address: StatsdAddress;
  socket: Socket | undefined;
  connected: boolean;
  closed: boolean;
  retryMs: number;
  retry: NodeJS.Timeout | undefined;
  /** When packets were first seen waiting with no byte moving, and the bytes written then. */
  stalledSince: number | undefined;
  bytesAtStall: number;
}

function open(state: TcpState): void {
  state.retry = undefined;
  if (state.closed) return;
  const target = state.address.current();
  if (target === undefined) return retryLater(state);
  const socket = connect({ host: target.address, port: state.options.port });
  state.socket = socket;
  socket.setNoDelay(true);
  socket.unref();
  socket.on('connect', () => {
    state.connected = true;
    state.retryMs = FIRST_RETRY_MS;
    state.stalledSince = undefined;
    state.address.worked();
  });
  // What the server says is not read; draining it keeps its bytes from piling up here.
  socket.on('data', ignore);
  socket.on('error', (error) => {
    state.address.failed();
    state.options.onError(error);
  });
  socket.on('close', () => {
    if (state.socket !== socket) return;
    state.socket = undefined;
    state.connected = false;
    retryLater(state);
  });
}

function retryLater(state: TcpState): void {
  if (state.closed) return;
  state.retry = setTimeout(open, state.retryMs, state);
  state.retry.unref();
  state.retryMs = Math.min(MAX_RETRY_MS, state.retryMs * 2);
}

function sendTcp(state: TcpState, packet: string): boolean {
  const { socket } = state;
  // While it connects, the socket holds what is written (within the same bound) and sends it
  // once connected: the first flush after start-up is not lost to a slow connect.
  if (socket === undefined || state.closed) return false;
  if (socket.writableLength > 0 && stalled(state, socket)) return false;
  if (socket.writableLength + packet.length + 1 > MAX_BACKLOG_BYTES) return false;
  socket.write(`${packet}\n`);
  return true;
}

/** Whether the connection is stuck: then it is replaced, and this packet is dropped. */
function stalled(state: TcpState, socket: Socket): boolean {
  const now = Date.now();
  if (state.stalledSince === undefined || socket.bytesWritten !== state.bytesAtStall) {
    state.stalledSince = now;
    state.bytesAtStall = socket.bytesWritten;
    return false;
  }
  if (now - state.stalledSince < STALL_MS) return false;
  state.stalledSince = undefined;
  socket.destroy(new Error(`statsd: no byte taken for ${STALL_MS / 1000} s; reconnecting`));
  return true;
}

async function closeTcp(state: TcpState): Promise<void> {
  state.closed = true;
  clearTimeout(state.retry);
  state.address.close();
  const { socket } = state;
  if (socket === undefined) return;
  await new Promise<void>((resolve) => {
    const timer = setTimeout(() => socket.destroy(), CLOSE_MS);
    socket.once('close', () => {
      clearTimeout(timer);
      resolve();
    });
    // Once the last packets are in the kernel's hands there is nothing to wait for: a server
    // that reads nothing would never answer the FIN.
    if (state.connected) socket.end(() => socket.destroy());
    else socket.destroy();
  });
}

export function createUdpTransport(options: TransportOptions): StatsdTransport {
  const address = addressOf(options);
  /** One socket per address family, made when an address of that family is first sent to. */
  const sockets = new Map<4 | 6, UdpSocket>();
  const socketFor = (family: 4 | 6): UdpSocket => {
    let socket = sockets.get(family);
    if (socket === undefined) {
      socket = createSocket(family === 6 ? 'udp6' : 'udp4');
      socket.unref();
      socket.on('error', (error) => options.onError(error));
      sockets.set(family, socket);
    }
    return socket;
  };
  let pending = 0;
  let closed = false;
  const sent = (error: Error | null) => {
    pending -= 1;
    if (error === null) return address.worked();
    address.failed();
    options.onLost?.();
    options.onError(error);
  };
  return {
    send(packet) {
      const target = address.current();
      if (closed || target === undefined || pending >= MAX_UDP_PENDING) return false;
      pending += 1;
      socketFor(target.family).send(packet, options.port, target.address, sent);
      return true;
    },
    async close() {
      closed = true;
      address.close();
      await Promise.all([...sockets.values()].map(closeUdp));
    },
  };
}

function closeUdp(socket: UdpSocket): Promise<void> {
  return new Promise((resolve) => {
    const timer = setTimeout(resolve, CLOSE_MS);
    socket.close(() => {
      clearTimeout(timer);
      resolve();
    });
  });
}

function ignore(): void {
  // Nothing a statsd server sends is read.
}
