import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterAll, describe, expect, it } from 'vitest';
import type { Entry } from '../../src/core/check.js';
import { loadRules } from '../../src/rules/loadRules.js';
import { matchRule } from '../../src/rules/match.js';
import type { DomainRules } from '../../src/rules/types.js';

const OPTIONS = { defaultAlgorithm: 'sliding_window' } as const;
const dir = mkdtempSync(join(tmpdir(), 'tollgate-match-'));
afterAll(() => rmSync(dir, { recursive: true }));

/** Loads one rules document; each rate_limit's `name` identifies the rule a match lands on. */
function rules(yaml: string): DomainRules {
  const file = join(dir, 'rules.yaml');
  writeFileSync(file, yaml);
  const loaded = loadRules(file, OPTIONS).domains.get('test');
  if (loaded === undefined) throw new Error('no domain test');
  return loaded;
}

const entries = (...pairs: [string, string][]): Entry[] =>
  pairs.map(([key, value]) => ({ key, value }));

const limit = (name: string): string =>
  `rate_limit: {name: ${name}, unit: second, requests_per_unit: 1}`;

function matched(domain: DomainRules, ...pairs: [string, string][]): string | undefined {
  const node = matchRule(domain, entries(...pairs));
  return node === undefined ? undefined : (node.limit?.name ?? 'unlimited');
}

describe('matchRule', () => {
  const precedence = rules(`
domain: test
descriptors:
  - {key: user, ${limit('bare')}}
  - {key: user, value: 'a*', ${limit('prefix')}}
  - {key: user, value: alice, ${limit('exact')}}
  - {key: user, value: 'al*', ${limit('longer-prefix')}}
  - {key: user, value: '*z', ${limit('suffix')}}
  - {key: user, value: 'x*y*q', ${limit('middle')}}
  - {key: user, value: '*', ${limit('star')}}
  - {key: other, value: 'a*', ${limit('other-key')}}
`);

  it('prefers the exact value, then the first wildcard in file order, then the bare key', () => {
    expect(matched(precedence, ['user', 'alice'])).toBe('exact');
    expect(matched(precedence, ['user', 'alan'])).toBe('prefix');
    expect(matched(precedence, ['user', 'a'])).toBe('prefix');
    expect(matched(precedence, ['other', 'alice'])).toBe('other-key');
    const noStar = rules(`
domain: test
descriptors:
  - {key: user, ${limit('bare')}}
  - {key: user, value: 'a*', ${limit('prefix')}}
`);
    expect(matched(noStar, ['user', 'bob'])).toBe('bare');
  });

  it("matches '*' as a prefix, a suffix, in the middle and alone", () => {
    expect(matched(precedence, ['user', 'buzz'])).toBe('suffix');
    expect(matched(precedence, ['user', 'xyz'])).toBe('suffix');
    expect(matched(precedence, ['user', 'x-y-q'])).toBe('middle');
    expect(matched(precedence, ['user', 'xyq'])).toBe('middle');
    expect(matched(precedence, ['user', 'x-q-y'])).toBe('star');
    expect(matched(precedence, ['user', 'xy'])).toBe('star');
    expect(matched(precedence, ['user', ''])).toBe('star');
  });

  it('needs the middle parts in order without overlapping the ends', () => {
    const middle = rules(`
domain: test
descriptors:
  - {key: k, value: 'ab*ba', ${limit('ab-ba')}}
  - {key: k, value: 'a*b*c*d', ${limit('abcd')}}
`);
    expect(matched(middle, ['k', 'aba'])).toBeUndefined();
    expect(matched(middle, ['k', 'abba'])).toBe('ab-ba');
    expect(matched(middle, ['k', 'a-c-b-d'])).toBeUndefined();
    expect(matched(middle, ['k', 'abcd'])).toBe('abcd');
    expect(matched(middle, ['k', 'a1b2c3d'])).toBe('abcd');
    expect(matched(middle, ['k', 'abd'])).toBeUndefined();
  });

  const nested = rules(`
domain: test
descriptors:
  - key: tenant
    value: acme
    ${limit('acme')}
    descriptors:
      - {key: route, value: /orders, ${limit('acme-orders')}}
      - {key: route, value: /health, rate_limit: {unlimited: true}}
      - key: route
        descriptors:
          - {key: method, ${limit('acme-route-method')}}
  - key: tenant
    descriptors:
      - {key: route, ${limit('any-route')}}
`);

  it('walks nested descriptors one entry per level', () => {
    expect(matched(nested, ['tenant', 'acme'])).toBe('acme');
    expect(matched(nested, ['tenant', 'acme'], ['route', '/orders'])).toBe('acme-orders');
    expect(matched(nested, ['tenant', 'acme'], ['route', '/x'], ['method', 'GET'])).toBe(
      'acme-route-method',
    );
    expect(matched(nested, ['tenant', 'beta'], ['route', '/orders'])).toBe('any-route');
  });

  it('matches nothing where the last entry lands on a rule without a limit', () => {
    expect(matched(nested, ['tenant', 'beta'])).toBeUndefined();
    expect(matched(nested, ['tenant', 'acme'], ['route', '/x'])).toBeUndefined();
  });

  it('matches nothing when the descriptor is deeper than the rules', () => {
    expect(matched(nested, ['tenant', 'acme'], ['route', '/orders'], ['method', 'GET'])).toBe(
      undefined,
    );
    expect(matched(nested, ['tenant', 'beta'], ['route', '/a'], ['x', 'y'])).toBeUndefined();
  });

  it('matches nothing for an unknown key or an empty descriptor', () => {
    expect(matched(nested, ['route', '/orders'])).toBeUndefined();
    expect(matched(nested, ['tenant', 'acme'], ['verb', 'GET'])).toBeUndefined();
    expect(matched(nested)).toBeUndefined();
  });

  it('returns an unlimited rule as the match', () => {
    const node = matchRule(nested, entries(['tenant', 'acme'], ['route', '/health']));
    expect(node).toMatchObject({ unlimited: true, limit: undefined, value: '/health' });
  });
});

describe('matchRule: what a match tells the limiter', () => {
  const flagged = rules(`
domain: test
descriptors:
  - key: tenant
    value: acme
    descriptors:
      - key: path
        value: 'files/*'
        share_threshold: true
        shadow_mode: true
        ${limit('files')}
      - key: path
        quota_mode: true
        rate_limit: {name: any-path, unit: minute, requests_per_unit: 5, overdraw: true, replaces: [{name: files}]}
`);

  it("walks back up through parent pointers, one per entry, to the rule's level", () => {
    const node = matchRule(flagged, entries(['tenant', 'acme'], ['path', 'files/a/b']));
    expect(node).toMatchObject({ value: 'files/*', shareThreshold: true, shadowMode: true });
    const chain: string[] = [];
    for (let at = node; at !== undefined; at = at.parent) chain.unshift(at.metricPart);
    expect(chain).toEqual(['tenant_acme', 'path_files/*']);
  });

  it('returns the flags and the limit of the rule matched', () => {
    const node = matchRule(flagged, entries(['tenant', 'acme'], ['path', '/other']));
    expect(node).toMatchObject({ value: undefined, quotaMode: true, shareThreshold: false });
    expect(node?.limit).toMatchObject({ name: 'any-path', overdraw: true });
    expect(node?.replaces).toEqual(['files']);
  });
});

describe('config/example.yaml', () => {
  const example = fileURLToPath(new URL('../../config/example.yaml', import.meta.url));
  const api = loadRules(example, OPTIONS).domains.get('api');
  if (api === undefined) throw new Error('example.yaml has no domain api');
  const limitOf = (...pairs: [string, string][]) => matchRule(api, entries(...pairs))?.limit;

  it('loads and matches each kind of rule', () => {
    expect(api.tenantKey).toBe('tenant');
    expect(limitOf(['tenant', 'acme'])).toMatchObject({ algorithm: 'token_bucket', burst: 50 });
    expect(limitOf(['tenant', 'acme'], ['route', '/orders'])).toMatchObject({
      windowMs: 30_000,
      unit: undefined,
    });
    expect(matchRule(api, entries(['tenant', 'acme'], ['route', '/healthz']))?.unlimited).toBe(
      true,
    );
    expect(limitOf(['tenant', 'trial-42'])).toMatchObject({ name: 'trial', unit: 'hour' });
    expect(limitOf(['tenant', 'globex'])).toMatchObject({ unit: 'second', requestsPerUnit: 10 });
    expect(limitOf(['remote_address', '10.0.0.1'])).toMatchObject({ windowMs: 300_000 });
  });
});
