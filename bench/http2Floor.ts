import { createServer, constants, type ServerHttp2Stream } from 'node:http2';
import * as grpc from '@grpc/grpc-js';
import { encodeResponse } from '../src/servers/grpc/codec.js';

/** The node:http2 floors' common part (bareServer.ts): gRPC framed by hand, one constant answer. */

export const REPLY = encodeResponse({
  code: 'OK',
  statuses: [{ code: 'OK', limitRemaining: 0 }],
});

// One length-prefixed message: not compressed, then its length, big-endian.
const FRAME = Buffer.alloc(5 + REPLY.length);
FRAME.writeUInt32BE(REPLY.length, 1);
REPLY.copy(FRAME, 5);

export function answerOk(stream: ServerHttp2Stream): void {
  if (stream.destroyed) return;
  stream.respond(
    { [constants.HTTP2_HEADER_STATUS]: 200, 'content-type': 'application/grpc' },
    { waitForTrailers: true },
  );
  stream.once('wantTrailers', () => stream.sendTrailers({ 'grpc-status': '0' }));
  stream.end(FRAME);
}

/** A trailers-only UNAVAILABLE, so that a failed round trip shows as an error in ghz's counts. */
export function answerUnavailable(stream: ServerHttp2Stream): void {
  answerStatus(stream, grpc.status.UNAVAILABLE);
}

/** A trailers-only answer with this status. */
export function answerStatus(stream: ServerHttp2Stream, status: grpc.status): void {
  if (stream.destroyed) return;
  stream.respond(
    {
      [constants.HTTP2_HEADER_STATUS]: 200,
      'content-type': 'application/grpc',
      'grpc-status': String(status),
    },
    { endStream: true },
  );
}

/**
 * Serves each call with `onCall`; with `withBody`, the request's bytes are collected and passed
 * on, otherwise they are dropped unread.
 */
export async function listenHttp2(
  host: string,
  port: number,
  onCall: (stream: ServerHttp2Stream, body: Buffer) => void,
  withBody = false,
): Promise<{ port: number; stop(): void }> {
  const server = createServer();
  const empty = Buffer.alloc(0);
  server.on('stream', (stream: ServerHttp2Stream) => {
    stream.on('error', () => {});
    if (!withBody) {
      stream.on('data', () => {});
      stream.on('end', () => onCall(stream, empty));
      return;
    }
    const chunks: Buffer[] = [];
    stream.on('data', (chunk: Buffer) => chunks.push(chunk));
    stream.on('end', () =>
      onCall(stream, chunks.length === 1 ? chunks[0]! : Buffer.concat(chunks)),
    );
  });
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(port, host, resolve);
  });
  const address = server.address();
  const bound = typeof address === 'object' && address ? address.port : port;
  return { port: bound, stop: () => server.close() };
}
