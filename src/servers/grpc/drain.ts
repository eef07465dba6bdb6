/**
 * The connections of the gRPC server's HTTP/2 listeners, kept so that a shutdown ends when the
 * last one has gone, even where grpc-js would not notice.
 *
 * grpc-js's tryShutdown sends each connection GOAWAY and waits for its 'close'. When a client
 * closes its connection as that GOAWAY crosses its own (grpc-go's Close does this), Node's HTTP/2
 * session fails with a protocol error: it is destroyed, its socket is no longer read, and its
 * 'close' never comes. grpc-js then waits for it until SHUTDOWN_GRACE runs out, and a service
 * with no call open took its whole grace to exit. So the drain also ends once every session is
 * destroyed, and destroys the sockets such sessions left behind.
 */
import type http2 from 'node:http2';
import type { Socket } from 'node:net';

/** How often a drain looks for sessions that ended without saying so. */
const POLL_MS = 25;

export interface ConnectionTracker {
  /** Follows the connections of one HTTP/2 server. */
  track(http2Server: http2.Http2Server | http2.Http2SecureServer): void;
  /**
   * Calls `drained` once no session is alive, after destroying the sockets left open. Returns a
   * function that stops waiting.
   */
  whenDrained(drained: () => void): () => void;
}

export function createConnectionTracker(): ConnectionTracker {
  const sockets = new Set<Socket>();
  const sessions = new Set<http2.ServerHttp2Session>();
  return {
    track(http2Server) {
      http2Server.on('connection', (socket: Socket) => {
        sockets.add(socket);
        socket.once('close', () => sockets.delete(socket));
      });
      http2Server.on('session', (session: http2.ServerHttp2Session) => {
        sessions.add(session);
        session.once('close', () => sessions.delete(session));
      });
    },
    whenDrained(drained) {
      const check = () => {
        for (const session of sessions) {
          if (!session.destroyed) return;
        }
        clearInterval(timer);
        for (const socket of sockets) socket.destroy();
        drained();
      };
      const timer = setInterval(check, POLL_MS);
      timer.unref();
      return () => clearInterval(timer);
    },
  };
}
