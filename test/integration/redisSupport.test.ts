import { describe, expect, it } from 'vitest';
import { PortTaken, spawnRedisOn, startRedis } from '../support/redis.js';

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
});
