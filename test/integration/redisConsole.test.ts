import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { spawnTollgate } from '../support/processes.js';
import { startRedis, type TestRedis } from '../support/redis.js';
import { callCheck, d } from '../support/tollgate.js';

// ioredis prints some warnings itself, with console.warn: a password that a Redis without one
// does not need is one. The service's output must stay its log, one JSON line per event, with
// such a warning among them, and no credential in any of it.

let redis: TestRedis;

beforeAll(async () => {
  redis = await startRedis();
});

afterAll(async () => {
  await redis?.stop();
});

describe("ioredis's own console output", () => {
  it('goes through the log as one JSON line, and nothing else is printed', async () => {
    const tollgate = await spawnTollgate(
      'domain: api\ndescriptors:\n  - key: tenant\n    rate_limit: {unit: minute, requests_per_unit: 5}\n',
      { REDIS_URL: `redis://:unneeded-secret@127.0.0.1:${redis.port}`, LOG_LEVEL: 'info' },
      { captureStdout: true },
    );
    try {
      const response = await callCheck(tollgate.client, {
        domain: 'api',
        descriptors: [d('tenant', 'acme')],
      });
      expect(response.overall_code).toBe('OK');
    } finally {
      await tollgate.stop();
    }
    const output = tollgate.stdout() + tollgate.stderr();
    const lines = output.split('\n').filter((line) => line !== '');
    const notJson = lines.filter((line) => {
      try {
        return typeof JSON.parse(line) !== 'object';
      } catch {
        return true;
      }
    });
    expect(notJson).toEqual([]);
    const warnings = lines
      .map((line) => JSON.parse(line) as { level: number; msg: string })
      .filter((entry) => entry.level === 40 && /password/.test(entry.msg));
    expect(warnings.map((entry) => entry.msg)).toEqual([
      'REDIS_URL gives a password, but the Redis server asks for none: it was not used',
    ]);
    expect(output).not.toContain('unneeded-secret');
  });
});
