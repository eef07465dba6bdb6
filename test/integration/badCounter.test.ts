import { status as grpcStatus, type ServiceError } from '@grpc/grpc-js';
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { counterKey } from '../../src/store/keys.js';
import { counterByLabel } from '../support/metrics.js';
import { spawnTollgate, type TollgateProcess } from '../support/processes.js';
import { startRedis, type TestRedis } from '../support/redis.js';
import { callCheck, d } from '../support/tollgate.js';

// One counter key that holds something tollgate did not write (a string, a hash of other
// fields) must fail only the checks that touch it, even though checks that arrive together share
// a script call, and a check that touches it must leave its other counters untouched.

const RULES = `
domain: bad
descriptors:
  - key: tenant
    rate_limit: {unit: day, requests_per_unit: 1000000}
  - key: remote_address
    rate_limit: {unit: day, requests_per_unit: 1000000, algorithm: token_bucket}
`;
const DAY_MS = 86_400_000;

const tenantKey = (tenant: string) =>
  counterKey('', 'bad', [{ key: 'tenant', value: tenant }], undefined, 'sliding_window', DAY_MS);
const addressKey = (address: string) =>
  counterKey(
    '',
    'bad',
    [{ key: 'remote_address', value: address }],
    undefined,
    'token_bucket',
    DAY_MS,
  );

let redis: TestRedis;
let tollgate: TollgateProcess;

beforeAll(async () => {
  redis = await startRedis();
  tollgate = await spawnTollgate(RULES, { REDIS_URL: redis.url, REDIS_TIMEOUT: '1s' });
}, 60_000);

afterAll(async () => {
  await tollgate?.stop();
  await redis?.stop();
});

beforeEach(async () => {
  await redis.client.flushall();
});

const storeErrorKinds = () =>
  counterByLabel(tollgate.httpUrl, 'tollgate_store_errors_total', 'kind');

/** 300 checks at once, 30 for each of 10 tenants; the answers by tenant. */
async function flood(): Promise<Map<string, string[]>> {
  const answers = new Map<string, string[]>();
  await Promise.all(
    Array.from({ length: 300 }, async (_, i) => {
      const tenant = `t${i % 10}`;
      let answer: string;
      try {
        const response = await callCheck(tollgate.client, {
          domain: 'bad',
          descriptors: [d('tenant', tenant)],
        });
        answer = response.overall_code ?? 'none';
      } catch (error) {
        const { code, details } = error as ServiceError;
        answer = `${grpcStatus[code]}: ${details}`;
      }
      answers.set(tenant, [...(answers.get(tenant) ?? []), answer]);
    }),
  );
  return answers;
}

describe('a counter key that holds a foreign value', () => {
  it.each([
    ['a string', (key: string) => redis.client.set(key, 'not a counter')],
    ['a hash of other fields', (key: string) => redis.client.hset(key, 't', 'yesterday', 'c', 'x')],
  ])('as %s fails only the checks of its tenant, counted as wrong_type', async (_, plant) => {
    await plant(tenantKey('t3'));
    const before = (await storeErrorKinds()).wrong_type ?? 0;

    const answers = await flood();

    const wrongType =
      'UNAVAILABLE: store unavailable: redis: wrong type: WRONGTYPE ' +
      (_ === 'a string'
        ? 'Operation against a key holding the wrong kind of value'
        : 'a counter key holds a value that tollgate did not write');
    expect(answers.get('t3')).toEqual(Array.from({ length: 30 }, () => wrongType));
    for (const [tenant, got] of answers) {
      if (tenant !== 't3') expect(got, tenant).toEqual(Array.from({ length: 30 }, () => 'OK'));
    }
    const kinds = await storeErrorKinds();
    expect((kinds.wrong_type ?? 0) - before).toBe(30);
    expect(kinds.connection ?? 0).toBe(0);
  });

  it('fails a check that touches it without writing any of its other counters', async () => {
    await redis.client.set(addressKey('10.0.0.9'), 'not a counter');

    const failed = await callCheck(tollgate.client, {
      domain: 'bad',
      descriptors: [d('tenant', 'acme'), d('remote_address', '10.0.0.9')],
    }).catch((error: ServiceError) => error);
    expect((failed as ServiceError).code).toBe(grpcStatus.UNAVAILABLE);
    expect(await redis.client.exists(tenantKey('acme'))).toBe(0);

    // The same tenant beside a healthy address is decided and counted as usual.
    const ok = await callCheck(tollgate.client, {
      domain: 'bad',
      descriptors: [d('tenant', 'acme'), d('remote_address', '10.0.0.8')],
    });
    expect(ok.overall_code).toBe('OK');
    expect(ok.statuses?.map((s) => s.limit_remaining)).toEqual([999_999, 999_999]);
    expect(await redis.client.hget(tenantKey('acme'), 'c')).toBe('1');
  });
});
