import { writeFileSync } from 'node:fs';
import { resolve } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {
  ALERTS_PATH,
  alertNames,
  dashboardQueries,
  everyQuery,
  metricNames,
  missingLabels,
  missingNames,
  withVariablesFilled,
} from '../support/observability.js';
import { spawnTollgate, type TollgateProcess } from '../support/processes.js';
import { startPrometheus, type TestPrometheus } from '../support/prometheus.js';
import { startRedis, type TestRedis } from '../support/redis.js';
import { openRlqs, usageReport, type RlqsTestStream } from '../support/rlqsClient.js';
import { callCheck, codes, d, eventually, writeRules } from '../support/tollgate.js';

// deploy/'s dashboard and alerts against the real tollgate under WORKERS=2 (the sums the primary
// makes) and a real Prometheus scraping it, after traffic that gives their labelled series values:
// within, near and over a limit, a shadow rule, the over-limit cache, a failed reload, lost Redis,
// an RLQS stream that reports requests past a limit, and one ended at an RLQS bound.

const LIMIT = 10;
const RULES = `domain: api
descriptors:
  - key: tenant
    rate_limit: { unit: day, requests_per_unit: ${LIMIT}, algorithm: fixed_window }
  - key: trial
    shadow_mode: true
    rate_limit: { unit: day, requests_per_unit: 1 }
`;

/** Series that this traffic cannot give a value, and why. */
const EMPTY_HERE: Record<string, string> = {
  ratelimit_service_rate_limit_over_limit_with_local_cache: 'counted under COMPAT_MODE=reference',
  tollgate_rules_info: 'set by rules from xDS',
};

let redis: TestRedis;
let tollgate: TollgateProcess;
let prometheus: TestPrometheus;
let exposition: string;
/** Left open, so that the RLQS gauges count it. */
let rlqs: RlqsTestStream | undefined;
beforeAll(async () => {
  redis = await startRedis();
  const rulesPath = writeRules(RULES);
  tollgate = await spawnTollgate(RULES, {
    CONFIG_PATH: rulesPath,
    REDIS_URL: redis.url,
    REDIS_TIMEOUT: '1s',
    WORKERS: '2',
    RLQS_MAX_REPORTS_PER_SECOND: '1',
  });
  prometheus = await startPrometheus(new URL(tollgate.httpUrl).host, [resolve(ALERTS_PATH)]);

  const check = (key: string, value: string) =>
    callCheck(tollgate.client, { domain: 'api', descriptors: [d(key, value)] });
  const answers = [];
  for (let i = 0; i < LIMIT + 3; i++) answers.push(codes(await check('tenant', 'acme'))[0]);
  expect(answers.filter((code) => code === 'OK')).toHaveLength(LIMIT);
  for (let i = 0; i < 3; i++) expect(codes(await check('trial', 'initech'))[0]).toBe('OK');
  // RLQS: 5 requests allowed past the limit of 10, then a stream past its reports a second.
  rlqs = openRlqs(tollgate.address);
  rlqs.stream.write(usageReport({ tenant: 'umbrella' }, LIMIT + 5, 'api', 2));
  expect(await rlqs.next()).toHaveProperty('bucket_action');
  const chatty = openRlqs(tollgate.address);
  for (let i = 0; i < 7; i++) chatty.stream.write(usageReport({ tenant: 'hooli' }, 0, 'api', 1));
  expect((await chatty.ended).details).toMatch(/RLQS_MAX_REPORTS_PER_SECOND/);
  chatty.close();
  writeFileSync(rulesPath, 'domain: api\ndescriptors: [ broken\n');
  tollgate.child.kill('SIGHUP');
  await redis.kill();
  await expect(check('tenant', 'globex')).rejects.toThrow(/UNAVAILABLE/);

  await eventually(async () => {
    exposition = await (await fetch(`${tollgate.httpUrl}/metrics`)).text();
    return counted('tollgate_config_loads_total', 'result="error"');
  }, 20_000);
}, 120_000);
afterAll(async () => {
  rlqs?.close();
  await prometheus?.stop();
  await tollgate?.stop();
  await redis?.stop();
});

/** Whether /metrics has a sample of `name` above 0 with this label among its labels. */
const counted = (name: string, label: string) =>
  new RegExp(`^${name}\\{[^}]*${label}[^}]*\\} [1-9]`, 'm').test(exposition);

describe('the metrics that the dashboard and the alerts query', () => {
  it('are all in /metrics', () => {
    const used = everyQuery().flatMap((q) => metricNames(q.expr));
    expect(missingNames([...new Set(used)], exposition)).toEqual([]);
  });

  it('are grouped and matched by labels and values that tollgate gives them', () => {
    for (const { where, expr } of everyQuery()) {
      if (metricNames(expr).every((name) => name in EMPTY_HERE)) continue;
      expect(missingLabels(expr, exposition), `${where}: ${expr}`).toEqual([]);
    }
  });

  it('have values once traffic has given them some', () => {
    const expected: [string, string][] = [
      ['tollgate_check_duration_seconds_count', 'outcome="ok"'],
      ['tollgate_check_duration_seconds_count', 'outcome="over_limit"'],
      ['tollgate_check_duration_seconds_count', 'outcome="unavailable"'],
      ['ratelimit_service_rate_limit_total_hits', 'key1="tenant"'],
      ['ratelimit_service_rate_limit_within_limit', 'key1="tenant"'],
      ['ratelimit_service_rate_limit_near_limit', 'key1="tenant"'],
      ['ratelimit_service_rate_limit_over_limit', 'domain="api"'],
      ['ratelimit_service_rate_limit_shadow_mode', 'key1="trial"'],
      ['ratelimit_service_response_time_seconds_bucket', 'le="\\+Inf"'],
      ['tollgate_store_errors_total', 'kind="'],
      ['tollgate_config_loads_total', 'result="success"'],
      ['tollgate_rlqs_requests_reported_total', 'result="allowed"'],
      ['tollgate_rlqs_requests_reported_total', 'result="denied"'],
      ['tollgate_rlqs_assignments_total', 'action="'],
      ['tollgate_bounds_reached_total', 'bound="rlqs_reports"'],
    ];
    for (const [name, label] of expected) expect(counted(name, label), name).toBe(true);
    for (const name of [
      'tollgate_over_limit_cache_hits_total',
      'tollgate_rlqs_streams',
      'tollgate_rlqs_buckets',
      'tollgate_rlqs_reports_total',
      'tollgate_rlqs_over_admitted_total',
    ]) {
      expect(exposition, name).toMatch(new RegExp(`^${name} [1-9]`, 'm'));
    }
  });
});

describe('a real Prometheus scraping tollgate', () => {
  it('answers every dashboard query with series, but those this traffic cannot give', async () => {
    for (const { where, expr } of dashboardQueries()) {
      const query = withVariablesFilled(expr);
      const empty = metricNames(expr).every((name) => name in EMPTY_HERE);
      if (empty) {
        expect(await prometheus.query(query), `${where}: ${query}`).toEqual([]);
      } else {
        // A counter that appeared with the traffic has a rate once it has been scraped twice.
        await eventually(async () => (await prometheus.query(query)).length > 0, 30_000).catch(() =>
          expect.fail(`${where}: no series for ${query}`),
        );
      }
    }
  });

  it('evaluates every alert without error', async () => {
    await eventually(
      async () => (await prometheus.rules()).every((rule) => rule.health !== 'unknown'),
      30_000,
    );
    const rules = await prometheus.rules();
    expect(rules.map((rule) => rule.name).sort()).toEqual(alertNames().sort());
    for (const rule of rules) expect(rule.health, `${rule.name}: ${rule.lastError}`).toBe('ok');
  });
});
