import { spawnSync } from 'node:child_process';
import { describe, expect, it } from 'vitest';
import { PortTaken, spawnRedisOn, startRedis } from '../support/redis.js';
import { redisServer } from '../support/redisServer.js';

// Two suites at once on one machine: a port the other took first must not be used as our own,
// or a test would count on, and flush, the other suite's Redis.
describe("the tests' own redis-server", () => {
  it('is refused when another redis-server already holds its port', async () => {
    const other = await startRedis();
    try {
      await expect(spawnRedisOn(other.port)).rejects.toBeInstanceOf(PortTaken);
      expect(await other.client.ping()).toBe('PONG');
    } finally {
      await other.stop();
    }
  });

  // TEST_REDIS_SERVER (npm run test:valkey) must be what answers, not a redis-server on PATH.
  it('is the binary TEST_REDIS_SERVER names, or redis-server', async () => {
    const { stdout } = spawnSync(redisServer, ['--version'], { encoding: 'utf8' });
    const version = /\bv=(\d+\.\d+\.\d+)/.exec(stdout)?.[1];
    expect(version).toBeDefined();
    const redis = await startRedis();
    try {
      // Valkey gives its own version as valkey_version; its redis_version is a fixed 7.2.4.
      const info = await redis.client.info('server');
      const versions = [...info.matchAll(/^(?:redis|valkey)_version:(\S+)/gm)].map((m) => m[1]);
      expect(versions).toContain(version);
    } finally {
      await redis.stop();
    }
  });
});
