import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterAll, describe, expect, it } from 'vitest';
import {
  createRulesDumps,
  dumpRules,
  dumpRulesText,
  type RulesDumpText,
} from '../../src/rules/dumpRules.js';
import { loadRules } from '../../src/rules/loadRules.js';

const FIXTURES = fileURLToPath(new URL('../fixtures/rules/', import.meta.url));
const OPTIONS = { defaultAlgorithm: 'sliding_window' } as const;
const dir = mkdtempSync(join(tmpdir(), 'tollgate-dump-'));
afterAll(() => rmSync(dir, { recursive: true }));

function dump(files: Record<string, string>): string[] {
  const sub = mkdtempSync(join(dir, 'rules-'));
  for (const [name, yaml] of Object.entries(files)) writeFileSync(join(sub, name), yaml);
  return dumpRules(loadRules(sub, OPTIONS));
}

describe('dumpRules', () => {
  it('writes one line per limited or unlimited rule, in file order, named by its stats key', () => {
    expect(
      dump({
        'rules.yaml': `
domain: api
descriptors:
  - key: tenant
    value: acme
    rate_limit: {unit: minute, requests_per_unit: 600, algorithm: token_bucket, burst: 50, name: acme}
    descriptors:
      - key: route
        value: /orders
        rate_limit: {window: 30s, requests_per_unit: 100}
      - key: route
        value: /healthz
        rate_limit: {unlimited: true}
  - key: grouping
    descriptors:
      - key: leaf
        rate_limit: {unit: day, requests_per_unit: 0, algorithm: fixed_window}
  - key: tenant
    value: trial-*
    rate_limit: {window: 1h, requests_per_unit: 1000}
`,
      }),
    ).toEqual([
      'api.tenant_acme: unit=MINUTE requests_per_unit=600, algorithm=token_bucket, burst=50, name=acme, shadow_mode: false',
      'api.tenant_acme.route_/orders: window=30s requests_per_unit=100, algorithm=sliding_window, shadow_mode: false',
      'api.tenant_acme.route_/healthz: unlimited, shadow_mode: false',
      'api.grouping.leaf: unit=DAY requests_per_unit=0, algorithm=fixed_window, shadow_mode: false',
      'api.tenant_trial-*: unit=HOUR requests_per_unit=1000, algorithm=sliding_window, shadow_mode: false',
    ]);
  });

  it('adds replaces, quota_mode, overdraw and share_threshold where they apply', () => {
    expect(
      dump({
        'rules.yaml': `
domain: flags
descriptors:
  - key: user
    value: '*'
    share_threshold: true
    shadow_mode: true
    rate_limit: {name: users, unit: second, requests_per_unit: 10}
  - key: plan
    rate_limit:
      unit: month
      requests_per_unit: 5
      quota_mode: true
      overdraw: true
      replaces: [{name: users}, {name: other}]
  - key: other
    rate_limit: {name: other, unit: second, requests_per_unit: 1}
  - key: internal
    rate_limit: {unlimited: true, replaces: [{name: users}]}
`,
      }),
    ).toEqual([
      'flags.user_*: unit=SECOND requests_per_unit=10, algorithm=sliding_window, name=users, shadow_mode: true, share_threshold: true',
      'flags.plan: unit=MONTH requests_per_unit=5, algorithm=sliding_window, replaces=users,other, shadow_mode: false, quota_mode: true, overdraw: true',
      'flags.other: unit=SECOND requests_per_unit=1, algorithm=sliding_window, name=other, shadow_mode: false',
      'flags.internal: unlimited, replaces=users, shadow_mode: false',
    ]);
  });

  it('orders domains by name and rules of a merged domain by file', () => {
    const rules = loadRules(join(FIXTURES, 'merge'), { ...OPTIONS, mergeDomainConfig: true });
    expect(dumpRules(rules)).toEqual([
      'api.tenant_a*: unit=MINUTE requests_per_unit=10, algorithm=sliding_window, name=a-tenants, shadow_mode: false',
      'api.tenant: unit=MINUTE requests_per_unit=5, algorithm=sliding_window, name=general, shadow_mode: false',
      'api.tenant_ab*: unit=MINUTE requests_per_unit=20, algorithm=sliding_window, name=ab-tenants, shadow_mode: false',
      'api.route_/orders: unit=MINUTE requests_per_unit=50, algorithm=sliding_window, replaces=general, shadow_mode: false',
      'api.tenant_acme: unit=MINUTE requests_per_unit=30, algorithm=sliding_window, shadow_mode: false',
      'other.tenant: unit=SECOND requests_per_unit=1, algorithm=sliding_window, shadow_mode: false',
    ]);
    const sorted = dump({
      'a.yaml':
        'domain: zeta\ndescriptors: [{key: k, rate_limit: {unit: second, requests_per_unit: 1}}]\n',
      'b.yaml':
        'domain: alpha\ndescriptors: [{key: k, rate_limit: {unit: second, requests_per_unit: 2}}]\n',
    });
    expect(sorted.map((line) => line.split(':')[0])).toEqual(['alpha.k', 'zeta.k']);
  });

  it('writes nothing for rules without limits', () => {
    expect(dump({ 'rules.yaml': 'domain: empty\ndescriptors:\n  - key: k\n' })).toEqual([]);
  });
});

describe("/rlconfig's dumps", () => {
  const rules = loadRules(join(FIXTURES, 'merge'), { ...OPTIONS, mergeDomainConfig: true });

  it('hold the same lines as dumpRules, after the head, one a line', async () => {
    const text = await dumpRulesText(rules, ['# source: xds']);
    expect(text.body.toString()).toBe(['# source: xds', ...dumpRules(rules), ''].join('\n'));
    expect(text.lines).toBe(dumpRules(rules).length + 1);
    expect((await dumpRulesText(undefined, [])).body.length).toBe(0);
  });

  it('are built once per rules and head, and shared by the requests meanwhile', async () => {
    const built: RulesDumpText[] = [];
    const dumps = createRulesDumps((dump) => built.push(dump));
    const [a, b] = await Promise.all([dumps(rules, ['# v1']), dumps(rules, ['# v1'])]);
    expect(a).toBe(b);
    expect(await dumps(rules, ['# v1'])).toBe(a);
    expect(built).toHaveLength(1);
    // A new xDS version, with the same rules, or new rules: built again.
    expect((await dumps(rules, ['# v2'])).body.toString()).toMatch(/^# v2\n/);
    const reloaded = loadRules(join(FIXTURES, 'merge'), { ...OPTIONS, mergeDomainConfig: true });
    expect(await dumps(reloaded, ['# v2'])).not.toBe(a);
    expect(built).toHaveLength(3);
  });
});
