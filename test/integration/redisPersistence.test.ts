import { afterEach, describe, expect, it } from 'vitest';
import { startRedis, type TestRedis } from '../support/redis.js';
import { d, eventually, startTollgate, type Tollgate } from '../support/tollgate.js';

// What a Redis restart forgets, tollgate admits again (docs/redis.md, "Persistence and long
// windows"): a tenant limited to 10 an hour spends 8, Redis is killed and started again on the
// same port and data directory, and the same tenant asks again.

const RULES = `
domain: persist
descriptors:
  - key: tenant
    rate_limit: { unit: hour, requests_per_unit: 10, algorithm: fixed_window }
`;

let redis: TestRedis | undefined;
let tollgate: Tollgate | undefined;
afterEach(async () => {
  await tollgate?.stop();
  await redis?.stop();
  tollgate = redis = undefined;
});

async function allowedAfterRestart(args: string[]): Promise<number> {
  redis = await startRedis({ args });
  tollgate = await startTollgate({ rules: RULES, redisUrl: redis.url });
  const check = (tenant: string) =>
    tollgate!.check({ domain: 'persist', descriptors: [d('tenant', tenant)] });
  for (let i = 0; i < 8; i++) expect((await check('acme')).overall_code).toBe('OK');
  await redis.restart(); // SIGKILL, then a new server on the same port and directory
  // The service reconnects by itself; until then calls fail (FAILURE_MODE=error).
  await eventually(async () => (await check('probe')).overall_code === 'OK');
  let allowed = 0;
  for (let i = 0; i < 20; i++) if ((await check('acme')).overall_code === 'OK') allowed++;
  return allowed;
}

describe('a Redis restart', () => {
  it('without persistence forgets the window: the tenant spends its limit again', async () => {
    expect(await allowedAfterRestart([])).toBe(10);
  });

  it('with AOF (appendfsync always) keeps the window: only what was left is admitted', async () => {
    const left = await allowedAfterRestart(['--appendonly', 'yes', '--appendfsync', 'always']);
    expect(left).toBe(2);
  });
});
