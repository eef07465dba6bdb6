import { describe, expect, it } from 'vitest';
import { startBareServer, type BareKind } from '../../bench/bareServer.js';
import { difference, redisCommandCalls } from '../../bench/probes.js';
import { createRateLimitClient } from '@tollgate/client';
import { startRedis } from '../support/redis.js';
import { callCheck, d } from '../support/tollgate.js';

// The benchmark's baselines must speak the same RPC as tollgate, or the comparison means nothing.
describe.each<BareKind>(['grpc-js', 'http2'])('the bare %s baseline', (kind) => {
  it('answers ShouldRateLimit with a constant OK to a grpc-js client', async () => {
    const bare = await startBareServer(kind, '127.0.0.1', 0);
    const client = createRateLimitClient(`127.0.0.1:${bare.port}`);
    try {
      for (let i = 0; i < 3; i += 1) {
        const response = await callCheck(client, { domain: 'any', descriptors: [d('k', 'v')] });
        expect(response.overall_code).toBe('OK');
        expect(response.statuses?.map((s) => s.code)).toEqual(['OK']);
      }
    } finally {
      client.close();
      bare.stop();
    }
  });
});

describe('the node:http2 floor with one Redis round trip', () => {
  it('answers OK after exactly one script call per check, and UNAVAILABLE once Redis is gone', async () => {
    const redis = await startRedis();
    const bare = await startBareServer('http2-redis', '127.0.0.1', 0, redis.url);
    const client = createRateLimitClient(`127.0.0.1:${bare.port}`);
    try {
      const request = { domain: 'any', descriptors: [d('k', 'v'), d('k2', 'v2')] };
      await callCheck(client, request); // the first call may load the script (EVAL on NOSCRIPT)
      const before = await redisCommandCalls(redis.client);
      for (let i = 0; i < 5; i += 1) {
        const response = await callCheck(client, request);
        expect(response.overall_code).toBe('OK');
      }
      const calls = difference(await redisCommandCalls(redis.client), before);
      expect(calls).toEqual({ evalsha: 5, 'evalsha.usec': expect.any(Number) });
      await redis.kill();
      await expect(callCheck(client, request)).rejects.toMatchObject({ code: 14 });
    } finally {
      client.close();
      bare.stop();
      await redis.stop();
    }
  });
});

describe('the node:http2 floor running the commands of an exact decision', () => {
  it.each([1, 3])(
    'makes per check of %i descriptor(s) one FCALL of TIME, then HMGET and HSET per descriptor',
    async (n) => {
      const redis = await startRedis();
      const bare = await startBareServer('http2-commands', '127.0.0.1', 0, redis.url);
      const client = createRateLimitClient(`127.0.0.1:${bare.port}`);
      try {
        const descriptors = Array.from({ length: n }, (_, i) => d(`k${i}`, `v${i}`));
        const request = { domain: 'any', descriptors, hits_addend: 2 };
        await callCheck(client, request); // each counter's first write also sets w and its TTL
        const before = await redisCommandCalls(redis.client);
        for (let i = 0; i < 5; i += 1) {
          const response = await callCheck(client, request);
          expect(response.overall_code).toBe('OK');
        }
        const calls = difference(await redisCommandCalls(redis.client), before);
        const counts = Object.fromEntries(
          Object.entries(calls).filter(([name]) => !name.endsWith('.usec')),
        );
        expect(counts).toEqual({ fcall: 5, time: 5, hmget: 5 * n, hset: 5 * n });
        const keys = (await redis.client.keys('*')).sort();
        expect(keys).toHaveLength(n);
        const counter = await redis.client.hgetall(keys[0]!);
        expect(Object.keys(counter).sort()).toEqual(['c', 't', 'w']);
        expect(Math.abs(Number(counter.t) - Date.now())).toBeLessThan(60_000);
        expect(await redis.client.object('ENCODING', keys[0]!)).toBe('listpack');
        expect(await redis.client.pttl(keys[0]!)).toBeGreaterThan(0);
        await redis.kill();
        await expect(callCheck(client, request)).rejects.toMatchObject({ code: 14 });
      } finally {
        client.close();
        bare.stop();
        await redis.stop();
      }
    },
  );
});
