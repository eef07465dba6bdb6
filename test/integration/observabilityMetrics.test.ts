import { writeFileSync } from 'node:fs';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {
  alertQueries,
  dashboardQueries,
  metricNames,
  missingNames,
} from '../support/observability.js';
import { spawnTollgate, type TollgateProcess } from '../support/processes.js';
import { startRedis, type TestRedis } from '../support/redis.js';
import { callCheck, codes, d, eventually, writeRules } from '../support/tollgate.js';

// Every metric that deploy/'s dashboard and alerts query, found in the real /metrics of tollgate
// under WORKERS=2 (the sums the primary makes), after traffic that gives their labelled series
// values: within, near and over a limit, the over-limit cache, a failed reload, a lost Redis.

const LIMIT = 10;
const RULES = `domain: api
descriptors:
  - key: tenant
    rate_limit: { unit: hour, requests_per_unit: ${LIMIT}, algorithm: fixed_window }
`;

let redis: TestRedis;
let tollgate: TollgateProcess;
let rulesPath: string;
beforeAll(async () => {
  redis = await startRedis();
  rulesPath = writeRules(RULES);
  tollgate = await spawnTollgate(RULES, {
    CONFIG_PATH: rulesPath,
    REDIS_URL: redis.url,
    REDIS_TIMEOUT: '1s',
    WORKERS: '2',
  });
});
afterAll(async () => {
  await tollgate?.stop();
  await redis?.stop();
});

const check = (tenant: string) =>
  callCheck(tollgate.client, { domain: 'api', descriptors: [d('tenant', tenant)] });
const metrics = async () => (await fetch(`${tollgate.httpUrl}/metrics`)).text();

/** Whether the exposition has a sample of `name` above 0 with this label among its labels. */
const counted = (text: string, name: string, label: string) =>
  new RegExp(`^${name}\\{[^}]*${label}[^}]*\\} [1-9]`, 'm').test(text);

describe('the metrics that the dashboard and the alerts query', () => {
  it('are all in /metrics, with values once traffic has given them some', async () => {
    const answers = [];
    for (let i = 0; i < LIMIT + 3; i++) answers.push(codes(await check('acme'))[0]);
    expect(answers.filter((code) => code === 'OK')).toHaveLength(LIMIT);

    writeFileSync(rulesPath, 'domain: api\ndescriptors: [ broken\n');
    tollgate.child.kill('SIGHUP');
    await redis.kill();
    await expect(check('globex')).rejects.toThrow(/UNAVAILABLE/);

    let text = '';
    await eventually(async () => {
      text = await metrics();
      return counted(text, 'tollgate_config_loads_total', 'result="error"');
    }, 20_000);
    const expected: [string, string][] = [
      ['tollgate_check_duration_seconds_count', 'outcome="ok"'],
      ['tollgate_check_duration_seconds_count', 'outcome="over_limit"'],
      ['tollgate_check_duration_seconds_count', 'outcome="unavailable"'],
      ['ratelimit_service_rate_limit_total_hits', 'key1="tenant"'],
      ['ratelimit_service_rate_limit_within_limit', 'key1="tenant"'],
      ['ratelimit_service_rate_limit_near_limit', 'key1="tenant"'],
      ['ratelimit_service_rate_limit_over_limit', 'domain="api"'],
      ['ratelimit_service_response_time_seconds_bucket', 'le="\\+Inf"'],
      ['tollgate_store_errors_total', 'kind="'],
      ['tollgate_config_loads_total', 'result="success"'],
    ];
    for (const [name, label] of expected) expect(counted(text, name, label), name).toBe(true);
    expect(text).toMatch(/^tollgate_over_limit_cache_hits_total [1-9]/m);

    const used = [...dashboardQueries(), ...alertQueries()].flatMap((q) => metricNames(q.expr));
    expect(missingNames([...new Set(used)], text)).toEqual([]);
  });
});
