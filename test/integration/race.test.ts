import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startRedis, type TestRedis } from '../support/redis.js';
import { spawnTollgate, type TollgateProcess } from '../support/processes.js';
import { callCheck, d } from '../support/tollgate.js';
import { raceRules } from '../support/raceRules.js';

// The race from the brief: four service processes share one Redis, and 2,000 concurrent
// requests go to one key with limit N. Read-decide-write is one script, so exactly N
// are allowed, whichever instance answers. Windows are an hour long so no boundary interferes.
// Two of the processes call functions (REDIS_FUNCTIONS=on) and two send scripts (off), so each
// race runs both call paths on the same counter at once.

const LIMIT = 100;
const REQUESTS = 2_000;
const PROCESSES = 4;
const PATHS = ['on', 'off'] as const;
const RULES = raceRules('race', LIMIT);

let redis: TestRedis;
const instances: TollgateProcess[] = [];

beforeAll(async () => {
  redis = await startRedis();
  const env = { REDIS_URL: redis.url, REDIS_TIMEOUT: '5s' };
  instances.push(
    ...(await Promise.all(
      Array.from({ length: PROCESSES }, (_, i) =>
        spawnTollgate(RULES, { ...env, REDIS_FUNCTIONS: PATHS[i % 2]! }),
      ),
    )),
  );
  // Each took the path it was told to.
  const paths = await Promise.all(
    instances.map(async (instance) => (await fetch(`${instance.httpUrl}/rlconfig`)).text()),
  );
  expect(paths.map((text) => /^# redis calls: (\w+)/.exec(text)?.[1])).toEqual(
    instances.map((_, i) => (PATHS[i % 2] === 'on' ? 'functions' : 'scripts')),
  );
}, 60_000);

afterAll(async () => {
  const exits = await Promise.all(instances.map((instance) => instance.stop()));
  await redis?.stop();
  expect(exits).toEqual(instances.map(() => 0));
});

describe.each(['fixed', 'sliding', 'bucket'])(`%s across ${PROCESSES} processes`, (key) => {
  it(`allows exactly ${LIMIT} of ${REQUESTS} concurrent requests`, async () => {
    const calls = Array.from({ length: REQUESTS }, (_, i) =>
      callCheck(
        instances[i % instances.length]!.client,
        {
          domain: 'race',
          descriptors: [d(key, 'hot')],
        },
        30_000,
      ),
    );
    const responses = await Promise.all(calls);
    const allowed = responses.filter((response) => response.overall_code === 'OK').length;
    const denied = responses.filter((response) => response.overall_code === 'OVER_LIMIT').length;
    expect({ allowed, denied }).toEqual({ allowed: LIMIT, denied: REQUESTS - LIMIT });
  });
});
