import { createServer, constants, type ServerHttp2Stream } from 'node:http2';
import * as grpc from '@grpc/grpc-js';
import { Redis } from 'ioredis';
import { encodeResponse } from '../src/servers/grpc/codec.js';
import { shouldRateLimitMethod } from '../src/core/protos.js';

/**
 * The floors for a ShouldRateLimit server on this machine, answering one constant OK and decoding
 * nothing:
 * - `grpc-js`: the ceiling for any grpc-js service; tollgate's throughput is measured against it;
 * - `http2`: Node's http2 module with the gRPC framing written by hand, the least any Node server
 *   could spend per call. It is what a leaner path than grpc-js's for the hot RPC could reach at
 *   best, before doing any work of its own;
 * - `http2-redis`: the same, with exactly one Redis round trip per call before the answer, and
 *   nothing decided: what any Node service that asks Redis once per decision adds to the tail, a
 *   diagnostic rather than a bar.
 */
export type BareKind = 'grpc-js' | 'http2' | 'http2-redis';

export const BARE_KINDS: readonly BareKind[] = ['grpc-js', 'http2', 'http2-redis'];

const REPLY = encodeResponse({ code: 'OK', statuses: [{ code: 'OK', limitRemaining: 0 }] });

/**
 * The round trip: an EVALSHA of `return 1`, defined as ioredis defines tollgate's decision script
 * (defineCommand: EVALSHA, EVAL once on NOSCRIPT). A script call rather than a PING, because a
 * decision is one script call (EVALSHA, or FCALL on Redis Functions): Redis finds the code and
 * enters Lua as it does for a decision, and INFO commandstats counts a script call, so the
 * floor's Redis CPU and "script calls per request" read like the services'. The script itself
 * does nothing, so what the floor costs Redis is the round trip's and the call's.
 */
const ROUND_TRIP_LUA = 'return 1';

export async function startBareServer(
  kind: BareKind,
  host: string,
  port: number,
  redisUrl?: string,
): Promise<{ port: number; stop(): void }> {
  if (kind === 'grpc-js') return startGrpcJs(host, port);
  if (kind === 'http2') return startHttp2(host, port);
  if (!redisUrl) throw new Error('the http2-redis floor needs a Redis URL');
  return startHttp2WithRedis(host, port, redisUrl);
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

// One length-prefixed message: not compressed, then its length, big-endian.
const FRAME = Buffer.alloc(5 + REPLY.length);
FRAME.writeUInt32BE(REPLY.length, 1);
REPLY.copy(FRAME, 5);

function answerOk(stream: ServerHttp2Stream): void {
  if (stream.destroyed) return;
  stream.respond(
    { [constants.HTTP2_HEADER_STATUS]: 200, 'content-type': 'application/grpc' },
    { waitForTrailers: true },
  );
  stream.once('wantTrailers', () => stream.sendTrailers({ 'grpc-status': '0' }));
  stream.end(FRAME);
}

/** A trailers-only UNAVAILABLE, so that a failed round trip shows as an error in ghz's counts. */
function answerUnavailable(stream: ServerHttp2Stream): void {
  if (stream.destroyed) return;
  stream.respond(
    {
      [constants.HTTP2_HEADER_STATUS]: 200,
      'content-type': 'application/grpc',
      'grpc-status': String(grpc.status.UNAVAILABLE),
    },
    { endStream: true },
  );
}

async function listenHttp2(
  host: string,
  port: number,
  onCall: (stream: ServerHttp2Stream) => void,
): Promise<{ port: number; stop(): void }> {
  const server = createServer();
  server.on('stream', (stream: ServerHttp2Stream) => {
    stream.on('error', () => {});
    stream.on('data', () => {});
    stream.on('end', () => onCall(stream));
  });
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(port, host, resolve);
  });
  const address = server.address();
  const bound = typeof address === 'object' && address ? address.port : port;
  return { port: bound, stop: () => server.close() };
}

function startHttp2(host: string, port: number) {
  return listenHttp2(host, port, answerOk);
}

type RoundTripRedis = Redis & { floorRoundTrip(): Promise<unknown> };

async function startHttp2WithRedis(host: string, port: number, redisUrl: string) {
  // One connection, set up as tollgate's store sets up its own: no auto-pipelining (every call
  // writes its own command), no offline queue, no retries.
  const redis = new Redis(redisUrl, {
    enableAutoPipelining: false,
    enableOfflineQueue: false,
    maxRetriesPerRequest: 0,
    lazyConnect: true,
  }) as RoundTripRedis;
  redis.on('error', () => {});
  redis.defineCommand('floorRoundTrip', { numberOfKeys: 0, lua: ROUND_TRIP_LUA });
  await redis.connect();
  const server = await listenHttp2(host, port, (stream) => {
    redis.floorRoundTrip().then(
      () => answerOk(stream),
      () => answerUnavailable(stream),
    );
  });
  return {
    port: server.port,
    stop: () => {
      server.stop();
      redis.disconnect();
    },
  };
}
