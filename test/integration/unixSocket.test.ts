import { afterAll, beforeAll, expect, it } from 'vitest';
import { spawnTollgate, type TollgateProcess } from '../support/processes.js';
import { startRedis, type TestRedis } from '../support/redis.js';
import { callCheck, codes, d, isProbeKey } from '../support/tollgate.js';

// Redis on the same host, reached over its Unix socket: REDIS_URL=unix:///path, or the
// reference's REDIS_SOCKET_TYPE=unix with the bare path.

const RULES = `
domain: uds
descriptors:
  - key: tenant
    rate_limit: {unit: hour, requests_per_unit: 3}
`;

let redis: TestRedis;
const instances: TollgateProcess[] = [];

beforeAll(async () => {
  redis = await startRedis();
  if (!redis.unixSocket) throw new Error('this test needs a spawned redis-server');
  // Only the socket: a TCP address here would make the test pass without it.
  instances.push(
    await spawnTollgate(RULES, { REDIS_URL: `unix://${redis.unixSocket}` }),
    await spawnTollgate(RULES, { REDIS_URL: redis.unixSocket, REDIS_SOCKET_TYPE: 'unix' }),
  );
}, 60_000);

afterAll(async () => {
  const exits = await Promise.all(instances.map((instance) => instance.stop()));
  await redis?.stop();
  expect(exits).toEqual([0, 0]);
});

it('decides on the Redis behind the socket, shared by both forms', async () => {
  const request = { domain: 'uds', descriptors: [d('tenant', 'acme')] };
  const answers = [];
  for (let i = 0; i < 5; i += 1) {
    const instance = instances[i % 2]!;
    answers.push(codes(await callCheck(instance.client, request))[0]);
  }
  expect(answers).toEqual(['OK', 'OK', 'OK', 'OVER_LIMIT', 'OVER_LIMIT']);
  const clients = await redis.client.call('CLIENT', 'LIST');
  // Both services' connections came in through the socket.
  const overSocket = String(clients)
    .split('\n')
    .filter((line) => line.includes(`laddr=${redis.unixSocket}`));
  expect(overSocket.length).toBeGreaterThanOrEqual(2);
  expect((await redis.client.keys('tg:*')).filter((key) => !isProbeKey(key))).toHaveLength(1);
});
