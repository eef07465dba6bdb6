import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { refusal, runToExit, spawnTollgate, type TollgateProcess } from '../support/processes.js';
import { freePort } from '../support/ports.js';
import {
  README_ACL_COMMANDS,
  README_ACL_PUBSUB,
  spawnRedisOn,
  startRedis,
  type TestRedis,
} from '../support/redis.js';
import { callCheck, d, eventually } from '../support/tollgate.js';

// REDIS_URL's database must be the one counters go to. ioredis sends SELECT on each connection,
// and when that fails it carries on in database 0: start-up must stop instead, naming the
// database and the reason, and on a later connection no call may reach database 0; health says
// NOT_SERVING with the reason meanwhile, and recovers once SELECT works again.

const RULES = `
domain: api
descriptors:
  - key: tenant
    rate_limit: {unit: day, requests_per_unit: 1000}
`;

let redis: TestRedis;
const running: TollgateProcess[] = [];

beforeAll(async () => {
  redis = await startRedis();
});

afterEach(async () => {
  await Promise.all(running.splice(0).map((t) => t.stop()));
  await redis.client.flushall();
});

afterAll(async () => {
  await redis?.stop();
});

/** README's least-privilege user, with these commands more or fewer. */
async function setUser(user: string, ...changes: string[]): Promise<void> {
  await redis.client.call(
    'ACL',
    ...['SETUSER', user, 'reset', 'on', '>secret', 'resetkeys', '~tg:*', 'resetchannels', '-@all'],
    ...README_ACL_COMMANDS,
    ...README_ACL_PUBSUB,
    ...changes,
  );
}

/** How many keys database `db` holds, asked on a connection of its own. */
async function keysIn(db: number, server: TestRedis = redis): Promise<number> {
  const client = server.client.duplicate({ db });
  client.on('error', () => undefined);
  try {
    return await client.dbsize();
  } finally {
    client.disconnect();
  }
}

async function healthcheck(tollgate: TollgateProcess): Promise<[number, string]> {
  const response = await fetch(`${tollgate.httpUrl}/healthcheck`);
  return [response.status, await response.text()];
}

const check = (tollgate: TollgateProcess) =>
  callCheck(tollgate.client, { domain: 'api', descriptors: [d('tenant', 'acme')] }, 3_000).then(
    (response) => response.overall_code,
    (error: Error) => error.message,
  );

describe('a database that cannot be selected', () => {
  it('stops start-up when the server has no such database', async () => {
    const { code, stderr } = await runToExit(RULES, { REDIS_URL: `${redis.url}/99` });
    expect({ code, stderr: refusal(stderr) }).toEqual({
      code: 1,
      stderr: 'REDIS_URL: database 99 cannot be selected: ERR DB index is out of range',
    });
    expect(await keysIn(0)).toBe(0);
  });

  it('stops start-up when the ACL user lacks +select', async () => {
    await setUser('noselect');
    const url = `redis://noselect:secret@127.0.0.1:${redis.port}/2`;
    const { code, stderr } = await runToExit(RULES, { REDIS_URL: url });
    expect({ code, stderr: refusal(stderr) }).toEqual({
      code: 1,
      stderr:
        'REDIS_URL: database 2 cannot be selected: the ACL user lacks +select; ' +
        'grant +select or use database 0',
    });
    expect(await keysIn(0)).toBe(0);
  });

  it('on a reconnect whose SELECT fails, writes nothing anywhere, says NOT_SERVING, and recovers', async () => {
    await setUser('tollgate', '+select');
    const tollgate = await spawnTollgate(RULES, {
      REDIS_URL: `redis://tollgate:secret@127.0.0.1:${redis.port}/2`,
      REDIS_TIMEOUT: '1s',
    });
    running.push(tollgate);
    expect(await check(tollgate)).toBe('OK');
    const inTwo = await keysIn(2);
    expect(inTwo).toBeGreaterThan(0);

    // The user loses +select; its connection is dropped, and the next one's SELECT fails.
    await redis.client.call('ACL', 'SETUSER', 'tollgate', '-select');
    await redis.client.call('CLIENT', 'KILL', 'USER', 'tollgate');
    await eventually(async () => (await healthcheck(tollgate))[0] === 500);
    expect(await healthcheck(tollgate)).toEqual([
      500,
      'NOT_SERVING: store refuses checks (FAILURE_MODE=error): redis: REDIS_URL: database 2 ' +
        'cannot be selected: the ACL user lacks +select; grant +select or use database 0',
    ]);
    for (let i = 0; i < 5; i++) expect(await check(tollgate)).toMatch(/^14 UNAVAILABLE/);
    // Health probes and reconnects went on meanwhile: wait for a few more of each.
    await new Promise((resolve) => setTimeout(resolve, 2_500));
    expect(await keysIn(0)).toBe(0);

    await redis.client.call('ACL', 'SETUSER', 'tollgate', '+select');
    await eventually(async () => (await healthcheck(tollgate))[0] === 200);
    expect(await healthcheck(tollgate)).toEqual([200, 'OK']);
    expect(await check(tollgate)).toBe('OK');
    expect(await keysIn(0)).toBe(0);
    expect(await keysIn(2)).toBeGreaterThanOrEqual(inTwo);
  });

  it('on a reconnect to a server restarted with fewer databases, the same', async () => {
    const port = await freePort();
    let server = await spawnRedisOn(port, ['--databases', '4']);
    try {
      const tollgate = await spawnTollgate(RULES, {
        REDIS_URL: `redis://127.0.0.1:${port}/3`,
        REDIS_TIMEOUT: '1s',
      });
      running.push(tollgate);
      expect(await check(tollgate)).toBe('OK');

      await server.stop();
      server = await spawnRedisOn(port, ['--databases', '2']);
      await eventually(async () => (await healthcheck(tollgate))[0] === 500);
      expect(await healthcheck(tollgate)).toEqual([
        500,
        'NOT_SERVING: store refuses checks (FAILURE_MODE=error): redis: REDIS_URL: database 3 ' +
          'cannot be selected: ERR DB index is out of range',
      ]);
      expect(await check(tollgate)).toMatch(/^14 UNAVAILABLE/);
      await new Promise((resolve) => setTimeout(resolve, 2_000));
      expect(await keysIn(0, server)).toBe(0);

      await server.stop();
      server = await spawnRedisOn(port, ['--databases', '4']);
      await eventually(async () => (await healthcheck(tollgate))[0] === 200);
      expect(await check(tollgate)).toBe('OK');
      expect(await keysIn(0, server)).toBe(0);
      expect(await keysIn(3, server)).toBeGreaterThan(0);
    } finally {
      await server.stop();
    }
  });

  it('serves README least-privilege user on database 2 once it has +select', async () => {
    await setUser('selecting', '+select');
    const tollgate = await spawnTollgate(RULES, {
      REDIS_URL: `redis://selecting:secret@127.0.0.1:${redis.port}/2`,
    });
    running.push(tollgate);
    expect(await check(tollgate)).toBe('OK');
    expect(await keysIn(0)).toBe(0);
    expect(await keysIn(2)).toBeGreaterThan(0);
  });
});
