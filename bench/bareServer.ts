import * as grpc from '@grpc/grpc-js';
import { Redis } from 'ioredis';
import { shouldRateLimitMethod } from '../src/core/protos.js';
import { startHttp2WithCommands } from './commandsFloor.js';
import { REPLY, answerOk, answerUnavailable, listenHttp2 } from './http2Floor.js';

/**
 * The floors for a ShouldRateLimit server on this machine, answering one constant OK and decoding
 * nothing:
 * - `grpc-js`: the ceiling for any grpc-js service; tollgate's throughput is measured against it;
 * - `http2`: Node's http2 module with the gRPC framing written by hand, the least any Node server
 *   could spend per call. It is what a leaner path than grpc-js's for the hot RPC could reach at
 *   best, before doing any work of its own;
 * - `http2-redis`: the same, with exactly one Redis round trip per call before the answer, and
 *   nothing decided: what any Node service that asks Redis once per decision adds to the tail, a
 *   diagnostic rather than a bar;
 * - `http2-commands`: the same, whose one call per request is an FCALL running exactly the Redis
 *   commands of an exact decision on hash counters read with Redis TIME, and no logic around
 *   them (commandsFloor.ts): the least Redis could spend on such a decision, so a Redis-CPU
 *   target this floor misses is out of reach of any design of that kind.
 */
export type BareKind = 'grpc-js' | 'http2' | 'http2-redis' | 'http2-commands';

export const BARE_KINDS: readonly BareKind[] = [
  'grpc-js',
  'http2',
  'http2-redis',
  'http2-commands',
];

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
  if (!redisUrl) throw new Error(`the ${kind} floor needs a Redis URL`);
  if (kind === 'http2-commands') return startHttp2WithCommands(host, port, redisUrl);
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
