import { createServer, constants, type ServerHttp2Stream } from 'node:http2';
import * as grpc from '@grpc/grpc-js';
import { encodeResponse } from '../src/servers/grpc/codec.js';
import { shouldRateLimitMethod } from '../src/core/protos.js';

/**
 * The floors for a ShouldRateLimit server on this machine, answering one constant OK and decoding
 * nothing:
 * - `grpc-js`: the ceiling for any grpc-js service; tollgate's throughput is measured against it;
 * - `http2`: Node's http2 module with the gRPC framing written by hand, the least any Node server
 *   could spend per call. It is what a leaner path than grpc-js's for the hot RPC could reach at
 *   best, before doing any work of its own.
 */
export type BareKind = 'grpc-js' | 'http2';

const REPLY = encodeResponse({ code: 'OK', statuses: [{ code: 'OK', limitRemaining: 0 }] });

export async function startBareServer(
  kind: BareKind,
  host: string,
  port: number,
): Promise<{ port: number; stop(): void }> {
  return kind === 'http2' ? startHttp2(host, port) : startGrpcJs(host, port);
}

async function startGrpcJs(host: string, port: number) {
  const server = new grpc.Server();
  server.addService(
    {
      ShouldRateLimit: {
        ...shouldRateLimitMethod,
        requestDeserialize: (bytes: Buffer) => bytes,
        responseSerialize: (bytes: Buffer) => bytes,
      },
    },
    {
      ShouldRateLimit: (_call: unknown, callback: grpc.sendUnaryData<Buffer>) =>
        callback(null, REPLY),
    },
  );
  const bound = await new Promise<number>((resolve, reject) =>
    server.bindAsync(`${host}:${port}`, grpc.ServerCredentials.createInsecure(), (error, p) =>
      error ? reject(error) : resolve(p),
    ),
  );
  return { port: bound, stop: () => server.forceShutdown() };
}

async function startHttp2(host: string, port: number) {
  // One length-prefixed message: not compressed, then its length, big-endian.
  const frame = Buffer.alloc(5 + REPLY.length);
  frame.writeUInt32BE(REPLY.length, 1);
  REPLY.copy(frame, 5);
  const server = createServer();
  server.on('stream', (stream: ServerHttp2Stream) => {
    stream.on('error', () => {});
    stream.on('data', () => {});
    stream.on('end', () => {
      stream.respond(
        { [constants.HTTP2_HEADER_STATUS]: 200, 'content-type': 'application/grpc' },
        { waitForTrailers: true },
      );
      stream.once('wantTrailers', () => stream.sendTrailers({ 'grpc-status': '0' }));
      stream.end(frame);
    });
  });
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(port, host, resolve);
  });
  const address = server.address();
  const bound = typeof address === 'object' && address ? address.port : port;
  return { port: bound, stop: () => server.close() };
}
