import { mkdtempSync, readdirSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';
import { RulesError } from '../../src/errors.js';
import { loadRules } from '../../src/rules/loadRules.js';
import type { DomainRules, RuleLevel } from '../../src/rules/types.js';

const FIXTURES = fileURLToPath(new URL('../fixtures/rules/', import.meta.url));
const OPTIONS = { defaultAlgorithm: 'sliding_window' } as const;

/** One expected message per file in test/fixtures/rules/invalid, after the `NAME.yaml: ` prefix. */
const INVALID: Record<string, string> = {
  'bad-algorithm':
    "descriptors[0].rate_limit.algorithm: 'leaky_bucket' is not one of sliding_window, token_bucket, fixed_window",
  'bad-duration': "descriptors[0].rate_limit.window: invalid duration '5x': unknown unit 'x'",
  'bad-unit':
    "descriptors[0].descriptors[1].rate_limit.unit: 'minutes' is not one of second, minute, hour, day, week, month, year",
  'burst-with-zero-rpu': 'descriptors[0].rate_limit.burst: burst needs requests_per_unit > 0',
  'burst-without-token-bucket':
    'descriptors[0].rate_limit.burst: is valid only with algorithm token_bucket, not fixed_window',
  'burst-zero': 'descriptors[0].rate_limit.burst: must be between 1 and 4294967295, got 0',
  'comments-only': 'empty file: expected a map with domain and descriptors',
  'descriptor-not-a-map': "descriptors[0]: must be a map, got 'tenant'",
  'descriptors-not-a-list': 'descriptors: must be a list, got a map',
  'duplicate-bare-sibling':
    "descriptors[1]: duplicate descriptor composite key 'tenant' (same as descriptors[0])",
  'duplicate-sibling':
    "descriptors[0].descriptors[1]: duplicate descriptor composite key 'route_/orders' (same as descriptors[0].descriptors[0])",
  'duplicate-yaml-key': 'invalid YAML at line 2, column 1: Map keys must be unique',
  'empty-domain': 'domain: must be a non-empty string',
  'empty-file': 'empty file: expected a map with domain and descriptors',
  'empty-key': 'descriptors[0].key: must be a non-empty string',
  'empty-tenant-key': 'tenant_key: must be a non-empty string',
  'float-rpu': "descriptors[0].rate_limit.requests_per_unit: must be an integer, got '1.5'",
  'fractional-window':
    "descriptors[0].rate_limit.window: '1500ms' is not a whole number of seconds",
  'missing-domain': 'domain: is required',
  'missing-key': 'descriptors[0].key: is required',
  'missing-rpu':
    'descriptors[0].rate_limit.requests_per_unit: is required (0 denies every request)',
  'negative-rpu':
    'descriptors[0].rate_limit.requests_per_unit: must be between 0 and 4294967295, got -1',
  'no-unit-or-window': 'descriptors[0].rate_limit: needs a unit or a window',
  'non-map-document': 'expected a map with domain and descriptors, got a list',
  'not-supported-detailed-metric':
    'descriptors[0].detailed_metric: not supported yet: detailed_metric',
  'not-supported-metadata':
    'descriptors[0].descriptors[0].rate_limit.metadata: not supported yet: metadata',
  'not-supported-metadata-top': 'metadata: not supported yet: metadata',
  'not-supported-quota-mode': 'descriptors[0].rate_limit.quota_mode: not supported yet: quota_mode',
  'not-supported-replaces': 'descriptors[0].rate_limit.replaces: not supported yet: replaces',
  'not-supported-shadow-mode': 'descriptors[0].shadow_mode: not supported yet: shadow_mode',
  'not-supported-shadow-mode-in-rate-limit':
    'descriptors[0].rate_limit.shadow_mode: not supported yet: shadow_mode',
  'not-supported-share-threshold':
    'descriptors[0].share_threshold: not supported yet: share_threshold',
  'not-supported-value-to-metric':
    'descriptors[0].value_to_metric: not supported yet: value_to_metric',
  'rate-limit-not-a-map': "descriptors[0].rate_limit: must be a map, got '10/s'",
  'rpu-over-uint32':
    'descriptors[0].rate_limit.requests_per_unit: must be between 0 and 4294967295, got 4294967296',
  'string-rpu': "descriptors[0].rate_limit.requests_per_unit: must be an integer, got '100'",
  'token-bucket-too-fine':
    'descriptors[0].rate_limit.burst: token bucket too fine for exact integer arithmetic: ' +
    'burst 300000 × 31536000000 (window 31536000000ms / gcd with requests_per_unit) exceeds 2^52; ' +
    'use a shorter unit or window, or a smaller burst',
  'unit-and-window': 'descriptors[0].rate_limit.window: give either unit or window, not both',
  'unknown-descriptor-key':
    "descriptors[0].rate_limits: unknown key 'rate_limits' (expected one of key, value, rate_limit, descriptors)",
  'unknown-rate-limit-key':
    "descriptors[0].rate_limit.requests_per_second: unknown key 'requests_per_second' " +
    '(expected one of requests_per_unit, unit, window, algorithm, burst, unlimited, name)',
  'unknown-top-key':
    "descriptor: unknown key 'descriptor' (expected one of domain, tenant_key, descriptors)",
  'unlimited-not-bool': "descriptors[0].rate_limit.unlimited: must be true or false, got 'maybe'",
  'unlimited-with-rpu':
    'descriptors[0].rate_limit.requests_per_unit: not allowed with unlimited: true',
  'unlimited-with-unit': 'descriptors[0].rate_limit.unit: not allowed with unlimited: true',
  'window-not-a-string':
    "descriptors[0].rate_limit.window: invalid duration '30': missing unit after '30'",
  'window-too-long':
    "descriptors[0].rate_limit.window: '8761h' is longer than the longest window, 8760h",
  'window-zero': "descriptors[0].rate_limit.window: '0s' must be longer than 0s",
  'yaml-syntax-error':
    'invalid YAML at line 5, column 1: Flow map in block collection must be sufficiently indented and end with a }',
};

function messageOf(load: () => unknown): string {
  try {
    load();
  } catch (err) {
    expect(err).toBeInstanceOf(RulesError);
    return (err as Error).message;
  }
  throw new Error('expected a RulesError');
}

function rootOf(rules: DomainRules | undefined): RuleLevel {
  if (rules === undefined) throw new Error('domain missing');
  return rules.root;
}

describe('loadRules: invalid files', () => {
  const dir = join(FIXTURES, 'invalid');

  it('has one expected message per fixture', () => {
    const names = readdirSync(dir).map((file) => file.replace(/\.yaml$/, ''));
    expect(names.sort()).toEqual(Object.keys(INVALID).sort());
  });

  it.each(Object.entries(INVALID))('%s', (name, message) => {
    const file = `${name}.yaml`;
    expect(messageOf(() => loadRules(join(dir, file), OPTIONS))).toBe(`${file}: ${message}`);
  });
});

describe('loadRules: valid files', () => {
  const rules = loadRules(join(FIXTURES, 'valid/basic.yaml'), OPTIONS).domains.get('web');
  const root = rootOf(rules);
  const acme = root.exact.get('client')?.get('acme');

  it('reads the domain, tenant key and file name', () => {
    expect(rules).toMatchObject({ domain: 'web', tenantKey: 'client', file: 'basic.yaml' });
  });

  it('resolves every default of a limit', () => {
    expect(acme).toMatchObject({ key: 'client', value: 'acme', path: 'descriptors[0]' });
    expect(acme?.limit).toEqual({
      requestsPerUnit: 600,
      unit: 'minute',
      windowMs: 60_000,
      algorithm: 'token_bucket',
      burst: 50,
      name: 'acme-total',
    });
    expect(root.bare.get('client')?.limit).toEqual({
      requestsPerUnit: 10,
      unit: 'second',
      windowMs: 1_000,
      algorithm: 'token_bucket',
      burst: 10,
      name: '',
    });
  });

  it('names the unit a window equals, and none for a window of no whole unit', () => {
    const orders = acme?.children.wildcards[0]?.node.limit;
    expect(orders).toMatchObject({ windowMs: 5_400_000, unit: undefined });
    expect(root.wildcards[0]?.node.limit).toMatchObject({ windowMs: 604_800_000, unit: 'week' });
  });

  it('indexes exact, wildcard and bare values, reading a number value as its text', () => {
    const children = acme?.children;
    expect([...(children?.exact.get('status')?.keys() ?? [])]).toEqual(['200']);
    expect(children?.exact.get('status')?.get('200')?.path).toBe('descriptors[0].descriptors[0]');
    expect(children?.wildcards.map((w) => [w.key, w.parts])).toEqual([
      ['path', ['/api/', '/orders']],
    ]);
    expect(children?.bare.get('path')?.limit?.unit).toBe('hour'); // through a YAML alias
    expect(root.wildcards.map((w) => w.parts)).toEqual([['trial-', '']]);
  });

  it('marks unlimited rules and rules without a limit', () => {
    expect(root.bare.get('internal')).toMatchObject({ unlimited: true, limit: undefined });
    const grouping = root.bare.get('grouping');
    expect(grouping).toMatchObject({ unlimited: false, limit: undefined });
    expect(grouping?.children.bare.get('leaf')?.limit?.requestsPerUnit).toBe(0);
  });

  it('applies the default algorithm given in the options', () => {
    expect(acme?.children.wildcards[0]?.node.limit?.algorithm).toBe('sliding_window');
    const other = loadRules(join(FIXTURES, 'valid/basic.yaml'), {
      defaultAlgorithm: 'fixed_window',
    });
    const otherAcme = other.domains.get('web')?.root.exact.get('client')?.get('acme');
    expect(otherAcme?.children.wildcards[0]?.node.limit?.algorithm).toBe('fixed_window');
  });
});

describe('loadRules: directories', () => {
  it('loads every *.yaml and *.yml file, skipping dotfiles and other files', () => {
    const rules = loadRules(join(FIXTURES, 'valid/dir'), OPTIONS);
    expect([...rules.domains.keys()]).toEqual(['alpha', 'beta']);
    expect(rules.domains.get('beta')?.file).toBe('b.yml');
  });

  it('rejects a domain defined in two files, naming both', () => {
    expect(messageOf(() => loadRules(join(FIXTURES, 'duplicate-domains'), OPTIONS))).toBe(
      "b.yaml: domain: 'api' is already defined in a.yaml",
    );
  });

  it('rejects a directory without rules files', () => {
    const empty = mkdtempSync(join(tmpdir(), 'tollgate-rules-'));
    try {
      expect(messageOf(() => loadRules(empty, OPTIONS))).toMatch(
        /^tollgate-rules-\w+: no \*\.yaml or \*\.yml rules files in the directory$/,
      );
    } finally {
      rmSync(empty, { recursive: true });
    }
  });

  it('rejects a path that does not exist', () => {
    expect(messageOf(() => loadRules(join(FIXTURES, 'nowhere.yaml'), OPTIONS))).toMatch(
      /^cannot read rules: ENOENT/,
    );
  });
});
