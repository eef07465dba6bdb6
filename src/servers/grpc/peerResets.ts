/**
 * A budget of HTTP/2 stream resets per peer address, across its connections: the bound on rapid
 * reset (CVE-2023-44487) from a client that reconnects.
 *
 * nghttp2 bounds resets per connection: past a burst of 1,000, then 33 a second, it ends the
 * connection with GOAWAY. A client that opens a new connection each time keeps making the server
 * create and tear down streams as fast as it can send HEADERS and RST_STREAM, never waiting for an
 * answer. So the streams that a peer resets before they were answered count against a budget of
 * that peer (`maxResets` a period, refilled evenly). Once it is spent, the peer cools down:
 * each of its connections that resets one more stream is sent GOAWAY (ENHANCE_YOUR_CALM) and
 * closed, and its new connections are closed as they are accepted, for `coolDownMs`. Its other
 * connections, which reset nothing, are served as before: a sidecar's clients share 127.0.0.1.
 *
 * A reset after the answer costs nothing and does not count, nor do the streams that the server
 * itself resets (`refuseStream`), nor those of a connection being closed. An IPv6 peer is its /64,
 * which one host may hold whole. A Unix socket has no peer address: only nghttp2's bound applies.
 * The table of peers holds those that reset something lately, at most `maxPeers`; past it, the
 * peer that entered first is forgotten.
 */
import http2 from 'node:http2';
import type { Socket } from 'node:net';

type Http2Server = http2.Http2Server | http2.Http2SecureServer;

export interface PeerResetOptions {
  /** Streams a peer may reset before they were answered, per period; 0: no bound. */
  maxResets: number;
  periodMs: number;
  /** How long a peer past its budget is refused. */
  coolDownMs: number;
  /** Peers remembered at once. */
  maxPeers: number;
  /** Told of each connection closed or refused for its peer's resets. */
  onBound?(): void;
  /** The clock, in ms; monotonic by default. */
  now?(): number;
}

export interface PeerResets {
  /** Refuses a cooling peer's new connections on this server, and learns each session's peer. */
  configure(http2Server: Http2Server): void;
  /** Counts the stream against its peer's budget if the peer resets it before it is answered. */
  watch(stream: http2.ServerHttp2Stream): void;
  /** Stops the sweep. */
  close(): void;
}

/** The streams the server resets itself (the guard's bounds): their reset is not the peer's. */
const serverResets = new WeakSet<http2.ServerHttp2Stream>();

/** Resets a stream as the server: not counted against the peer. */
export function refuseStream(stream: http2.ServerHttp2Stream, code: number): void {
  serverResets.add(stream);
  stream.close(code);
}

interface Peer {
  /** Resets left in its budget, as of `at`. */
  tokens: number;
  at: number;
  /** Refused until then. */
  coolUntil: number;
}

export function createPeerResets(options: PeerResetOptions): PeerResets {
  const now = options.now ?? (() => performance.now());
  const table = createPeerTable(options);
  const peerOf = new WeakMap<http2.Http2Session, string>();
  const closing = new WeakSet<http2.Http2Session>();
  const bound = () => options.onBound?.();
  const timer = setInterval(() => table.sweep(now()), options.periodMs);
  timer.unref();

  const refuses = (address: string | undefined) => {
    if (table.size() === 0) return false;
    const key = peerKey(address);
    if (key === undefined || !table.cooling(key, now())) return false;
    bound();
    return true;
  };
  const onAborted = (stream: http2.ServerHttp2Stream) => {
    const session = stream.session;
    if (session === undefined || session.closed || session.destroyed) return;
    if (serverResets.has(stream) || closing.has(session)) return;
    const key = peerOf.get(session);
    if (key === undefined || !table.reset(key, now())) return;
    closing.add(session);
    bound();
    calmDown(session);
  };

  const onAbortedEvent = function (this: http2.ServerHttp2Stream) {
    onAborted(this);
  };

  return {
    configure(http2Server) {
      if (options.maxResets === 0) return;
      // Node's own accept (net.Server's `blockList`, Node 22.13 and later) closes a refused
      // peer's connection before it costs an HTTP/2 session; 'connection' catches the rest.
      (http2Server as { blockList?: unknown }).blockList = { check: refuses };
      http2Server.on('connection', (socket: Socket) => {
        if (refuses(socket.remoteAddress)) socket.destroy();
      });
      http2Server.on('session', (session: http2.ServerHttp2Session) => {
        const key = peerKey(session.socket?.remoteAddress);
        if (key !== undefined) peerOf.set(session, key);
      });
    },
    watch(stream) {
      if (options.maxResets === 0) return;
      // 'aborted' fires once at most: `on` spares the wrapper that `once` allocates, on every call.
      stream.on('aborted', onAbortedEvent);
    },
    close: () => clearInterval(timer),
  };
}

export interface PeerTable {
  size(): number;
  cooling(key: string, at: number): boolean;
  /** Counts one reset of the peer; true once it is past its budget, cooling down. */
  reset(key: string, at: number): boolean;
  /** Forgets the peers whose budget is whole again. */
  sweep(at: number): void;
}

export function createPeerTable(
  limits: Pick<PeerResetOptions, 'maxResets' | 'periodMs' | 'coolDownMs' | 'maxPeers'>,
): PeerTable {
  // Insertion-ordered: past maxPeers, the first one in goes.
  const peers = new Map<string, Peer>();
  const perMs = limits.maxResets / limits.periodMs;
  const tokensAt = (peer: Peer, at: number) =>
    Math.min(limits.maxResets, peer.tokens + Math.max(0, at - peer.at) * perMs);
  return {
    size: () => peers.size,
    cooling: (key, at) => at < (peers.get(key)?.coolUntil ?? -Infinity),
    reset(key, at) {
      let peer = peers.get(key);
      if (peer === undefined) {
        if (peers.size >= limits.maxPeers) peers.delete(peers.keys().next().value as string);
        peer = { tokens: limits.maxResets, at, coolUntil: -Infinity };
        peers.set(key, peer);
      }
      if (at < peer.coolUntil) return true;
      peer.tokens = tokensAt(peer, at) - 1;
      peer.at = at;
      if (peer.tokens >= 0) return false;
      // The budget refills from the end of the cool-down, not during it.
      peer.tokens = 0;
      peer.coolUntil = at + limits.coolDownMs;
      peer.at = peer.coolUntil;
      return true;
    },
    sweep(at) {
      for (const [key, peer] of peers) {
        if (at >= peer.coolUntil && tokensAt(peer, at) >= limits.maxResets) peers.delete(key);
      }
    },
  };
}

/**
 * GOAWAY with ENHANCE_YOUR_CALM, then the connection closes at once: every frame the peer has
 * sent meanwhile would still be read and parsed.
 */
function calmDown(session: http2.Http2Session): void {
  if (session.destroyed) return;
  try {
    session.goaway(http2.constants.NGHTTP2_ENHANCE_YOUR_CALM, 0, Buffer.from('too many resets'));
  } finally {
    session.destroy();
  }
}

/**
 * The address a budget belongs to: an IPv4 address as it is (an IPv4-mapped IPv6 one too), an
 * IPv6 address's /64; undefined without an address (a Unix socket).
 */
export function peerKey(address: string | undefined): string | undefined {
  if (address === undefined || address === '') return undefined;
  if (!address.includes(':')) return address;
  const bare = address.split('%')[0] as string;
  const mapped = /^::ffff:(\d+\.\d+\.\d+\.\d+)$/i.exec(bare);
  if (mapped) return mapped[1];
  const [head = '', tail] = bare.split('::');
  const left = head === '' ? [] : head.split(':');
  const right = tail === undefined || tail === '' ? [] : tail.split(':');
  const groups = [
    ...left,
    ...Array<string>(Math.max(0, 8 - left.length - right.length)).fill('0'),
    ...right,
  ];
  return `${groups
    .slice(0, 4)
    .map((group) => parseInt(group, 16).toString(16))
    .join(':')}::/64`;
}
