import * as grpc from '@grpc/grpc-js';
import { Redis } from 'ioredis';
import { answerOk, answerStatus, answerUnavailable, listenHttp2 } from './http2Floor.js';

/**
 * The `http2-commands` floor (bareServer.ts): node:http2, and per call one FCALL of a function
 * that runs the Redis commands an exact decision on hash counters read with Redis TIME cannot do
 * without, and nothing else: TIME, then for each counter HMGET key t w c and HSET key t <ms> c.
 * It decides nothing (c is a constant, the reply is ignored), so what it costs Redis is the least
 * any such design costs with one call per request: the call, its commands and the round trip.
 * It does not share calls among concurrent requests, as tollgate does under load, so tollgate
 * can spend less than it.
 *
 * Steady state as tollgate's fixed windows: a counter's first write (its hash has no w) also
 * writes w and sets the TTL, as tollgate does on a window's first write; every later call finds
 * w and writes t and c alone, without PEXPIRE. With the bench's windows of an hour, a run is
 * in that steady state after each key's first call.
 *
 * Keys: one per descriptor index, `bench-floor:{commands}:<i>`, one hash tag for all. The bench
 * sends the same request on every call of a scenario, so tollgate too holds one counter per
 * descriptor there; the keys stay few and each hash small (three fields), in listpack form like
 * tollgate's.
 */
export const COMMANDS_LIBRARY = 'bench_floor_commands';
const COMMANDS_FUNCTION = 'bench_floor_commands';

export const COMMANDS_LUA = `#!lua name=${COMMANDS_LIBRARY}
redis.register_function('${COMMANDS_FUNCTION}', function(keys)
  local time = redis.call('TIME')
  local now = time[1] * 1000 + (time[2] - time[2] % 1000) / 1000
  for i = 1, #keys do
    local held = redis.call('HMGET', keys[i], 't', 'w', 'c')
    if held[2] then
      redis.call('HSET', keys[i], 't', now, 'c', '1')
    else
      redis.call('HSET', keys[i], 't', now, 'w', '1', 'c', '1')
      redis.call('PEXPIRE', keys[i], 3600000)
    end
  end
  return 1
end)
`;

/** More descriptors than any request the bench sends; past it a call is refused. */
const MAX_COUNTERS = 64;

const KEYS = Array.from({ length: MAX_COUNTERS + 1 }, (_, n) =>
  Array.from({ length: n }, (_, i) => `bench-floor:{commands}:${i + 1}`),
);

function readVarint(bytes: Buffer, at: number): { value: number; next: number } | null {
  let value = 0;
  for (let shift = 0, i = at; i < bytes.length && shift < 35; shift += 7, i += 1) {
    value += (bytes[i]! & 0x7f) * 2 ** shift;
    if (bytes[i]! < 0x80) return { value, next: i + 1 };
  }
  return null;
}

/**
 * The number of descriptors in a gRPC-framed RateLimitRequest { string domain = 1; repeated
 * RateLimitDescriptor descriptors = 2; uint32 hits_addend = 3; }: its top-level fields 2 of wire
 * type 2. Null when the bytes are not one whole message of that shape.
 */
export function countDescriptors(framed: Buffer): number | null {
  if (framed.length < 5 || framed[0] !== 0) return null;
  const end = 5 + framed.readUInt32BE(1);
  if (end !== framed.length) return null;
  let count = 0;
  for (let at = 5; at < end;) {
    const tag = readVarint(framed, at);
    if (!tag) return null;
    const wire = tag.value % 8;
    at = tag.next;
    if (wire === 0) {
      const varint = readVarint(framed, at);
      if (!varint) return null;
      at = varint.next;
    } else if (wire === 2) {
      const length = readVarint(framed, at);
      if (!length) return null;
      at = length.next + length.value;
      if (tag.value === 0x12) count += 1;
    } else if (wire === 1 || wire === 5) {
      at += wire === 1 ? 8 : 4;
    } else {
      return null;
    }
    if (at > end) return null;
  }
  return count;
}

export async function startHttp2WithCommands(host: string, port: number, redisUrl: string) {
  // One connection, set up as the http2-redis floor's and tollgate's store's.
  const redis = new Redis(redisUrl, {
    enableAutoPipelining: false,
    enableOfflineQueue: false,
    maxRetriesPerRequest: 0,
    lazyConnect: true,
  });
  redis.on('error', () => {});
  await redis.connect();
  await redis.function('LOAD', 'REPLACE', COMMANDS_LUA);
  const server = await listenHttp2(
    host,
    port,
    (stream, body) => {
      const n = countDescriptors(body);
      if (n === null || n > MAX_COUNTERS) {
        answerStatus(stream, grpc.status.INVALID_ARGUMENT);
        return;
      }
      const keys = KEYS[n]!;
      redis.fcall(COMMANDS_FUNCTION, keys.length, ...keys).then(
        () => answerOk(stream),
        () => answerUnavailable(stream),
      );
    },
    true,
  );
  return {
    port: server.port,
    stop: () => {
      server.stop();
      redis.disconnect();
    },
  };
}
