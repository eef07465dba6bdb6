import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { refusal, runToExit, spawnTollgate, type TollgateProcess } from '../support/processes.js';
import { freePort } from '../support/ports.js';
import { README_ACL_COMMANDS, spawnRedisOn, startRedis, type TestRedis } from '../support/redis.js';
import { callCheck, d, eventually, healthStatus } from '../support/tollgate.js';

// Health tells whether checks can be decided, not only whether Redis answers PING. A Redis user
// without one of the commands a check needs passes PING, yet every check fails: health must say
// NOT_SERVING (FAILURE_MODE=error) with a reason that names the missing command, tollgate must
// say so at start-up, and health must recover by itself once the user is granted it.

const RULES = `
domain: health
descriptors:
  - key: tenant
    rate_limit: {unit: minute, requests_per_unit: 100}
`;
const COMMANDS = README_ACL_COMMANDS;

let redis: TestRedis;
const running: TollgateProcess[] = [];

beforeAll(async () => {
  redis = await startRedis();
});

afterAll(async () => {
  await Promise.all(running.map((t) => t.stop()));
  await redis?.stop();
});

async function asUser(user: string, commands: string[], env: Record<string, string> = {}) {
  await redis.client.call(
    'ACL',
    ...['SETUSER', user, 'reset', 'on', '>secret', 'resetkeys', '~tg:*', 'resetchannels', '-@all'],
    ...commands,
  );
  const tollgate = await spawnTollgate(
    RULES,
    {
      REDIS_URL: `redis://${user}:secret@127.0.0.1:${redis.port}`,
      REDIS_TIMEOUT: '1s',
      LOG_LEVEL: 'info',
      ...env,
    },
    { captureStdout: true, anyHealth: true },
  );
  running.push(tollgate);
  return tollgate;
}

async function healthcheck(tollgate: TollgateProcess): Promise<[number, string]> {
  const response = await fetch(`${tollgate.httpUrl}/healthcheck`);
  return [response.status, await response.text()];
}

describe('health with a Redis user that may not run what checks need', () => {
  it('is SERVING with exactly the commands of the ACL line', async () => {
    const tollgate = await asUser('complete', COMMANDS);
    expect(await healthcheck(tollgate)).toEqual([200, 'OK']);
    expect(
      (await callCheck(tollgate.client, { domain: 'health', descriptors: [d('tenant', 'a')] }))
        .overall_code,
    ).toBe('OK');
  });

  // EVAL and EVALSHA carry checks only where functions are not called.
  it.each([
    ['time', 'auto'],
    ['eval', 'off'],
    ['evalsha', 'off'],
    ['hmget', 'auto'],
    ['hset', 'auto'],
    ['pexpire', 'auto'],
  ])(
    'without +%s: NOT_SERVING, naming the command, from start-up (REDIS_FUNCTIONS=%s)',
    async (command, functions) => {
      const tollgate = await asUser(
        `without-${command}`,
        COMMANDS.filter((c) => c !== `+${command}`),
        { REDIS_FUNCTIONS: functions },
      );
      expect(await healthStatus(tollgate.address)).toBe('NOT_SERVING');
      const [status, reason] = await healthcheck(tollgate);
      expect(status).toBe(500);
      expect(reason).toMatch(/^NOT_SERVING: store refuses checks \(FAILURE_MODE=error\): redis: /);
      expect(reason).toContain(`'${command}' command`);
      // Said at start-up, in the logs, with the same reason.
      expect(tollgate.stdout()).toContain(
        'store refuses checks: no check can be decided until this is fixed',
      );
      expect(tollgate.stdout()).toContain(`'${command}' command`);
    },
  );

  it('without +fcall: decides by EVALSHA and says why, or refuses to start with REDIS_FUNCTIONS=on', async () => {
    const lacking = COMMANDS.filter((c) => c !== '+fcall');
    const tollgate = await asUser('without-fcall', lacking);
    expect(await healthcheck(tollgate)).toEqual([200, 'OK']);
    expect(tollgate.stdout()).toContain('redis: checks are decided by EVALSHA, not functions');
    expect(tollgate.stdout()).toContain("may not run 'fcall'");
    const rlconfig = await (await fetch(`${tollgate.httpUrl}/rlconfig`)).text();
    expect(rlconfig.split('\n')[0]).toBe(
      "# redis calls: scripts (EVALSHA): the Redis user may not run 'fcall': grant +fcall +function|load to call functions",
    );

    const { code, stderr } = await runToExit(RULES, {
      REDIS_URL: `redis://without-fcall:secret@127.0.0.1:${redis.port}`,
      REDIS_FUNCTIONS: 'on',
    });
    expect({ code, stderr: refusal(stderr) }).toEqual({
      code: 1,
      stderr:
        "REDIS_FUNCTIONS=on, but the Redis user may not run 'fcall': grant +fcall +function|load to call functions",
    });
  });

  it('with REDIS_FUNCTIONS=on, refused functions only after start-up: NOT_SERVING naming why, and no script sent', async () => {
    // Redis is down at start-up, so nothing is chosen; it comes up with a user without +fcall.
    const port = await freePort();
    const tollgate = await spawnTollgate(
      RULES,
      {
        REDIS_URL: `redis://late-on:secret@127.0.0.1:${port}`,
        REDIS_TIMEOUT: '1s',
        REDIS_FUNCTIONS: 'on',
        LOG_LEVEL: 'info',
      },
      { captureStdout: true, anyHealth: true },
    );
    running.push(tollgate);
    const late = await spawnRedisOn(port, [
      '--user',
      ...['late-on', 'on', '>secret', '~tg:*', '-@all'],
      ...COMMANDS.filter((c) => c !== '+fcall'),
    ]);
    try {
      const why = "REDIS_FUNCTIONS=on, but the Redis user may not run 'fcall'";
      await eventually(async () => (await healthcheck(tollgate))[1].includes(why), 15_000);
      expect(await healthStatus(tollgate.address)).toBe('NOT_SERVING');
      const check = { domain: 'health', descriptors: [d('tenant', 'late')] };
      await expect(callCheck(tollgate.client, check)).rejects.toMatchObject({
        details: expect.stringContaining(why),
      });
      // Decided by no script: no counter was written.
      expect(await late.client.keys('tg:*')).toEqual([]);
      // Granted, it calls functions by itself.
      await late.client.call('ACL', 'SETUSER', 'late-on', '+fcall');
      await eventually(async () => (await healthStatus(tollgate.address)) === 'SERVING', 15_000);
      expect((await callCheck(tollgate.client, check)).overall_code).toBe('OK');
      const rlconfig = await (await fetch(`${tollgate.httpUrl}/rlconfig`)).text();
      expect(rlconfig.split('\n')[0]).toMatch(
        /^# redis calls: functions \(FCALL of library tollgate_/,
      );
    } finally {
      await late.stop();
    }
  });

  it('says so, and stays SERVING, with FAILURE_MODE=allow', async () => {
    const tollgate = await asUser(
      'allowing',
      COMMANDS.filter((c) => c !== '+time'),
      { FAILURE_MODE: 'allow' },
    );
    expect(await healthStatus(tollgate.address)).toBe('SERVING');
    const [status, reason] = await healthcheck(tollgate);
    expect(status).toBe(200);
    expect(reason).toMatch(
      /^OK: store refuses checks, answering per FAILURE_MODE=allow: redis: .*'time' command/,
    );
  });

  it('turns SERVING by itself once the user is granted the command', async () => {
    const tollgate = await asUser(
      'granted-later',
      COMMANDS.filter((c) => c !== '+time'),
    );
    expect(await healthStatus(tollgate.address)).toBe('NOT_SERVING');
    await redis.client.call('ACL', 'SETUSER', 'granted-later', '+time');
    await eventually(async () => (await healthStatus(tollgate.address)) === 'SERVING', 10_000);
    expect(await healthcheck(tollgate)).toEqual([200, 'OK']);
    // The log line is written before health changes, but may reach the pipe after its answer.
    await eventually(async () => tollgate.stdout().includes('store decides checks again'), 5_000);
  });
});
