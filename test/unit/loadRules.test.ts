import { mkdtempSync, readdirSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';
import { RulesError } from '../../src/core/errors.js';
import { loadRules } from '../../src/rules/loadRules.js';
import { rulesInFileOrder } from '../../src/rules/parseRules.js';
import type { DomainRules, RuleLevel, RuleNode } from '../../src/rules/types.js';

const FIXTURES = fileURLToPath(new URL('../fixtures/rules/', import.meta.url));
const OPTIONS = { defaultAlgorithm: 'sliding_window' } as const;
const MERGE = { ...OPTIONS, mergeDomainConfig: true };

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
  'calendar-and-unit': 'descriptors[0].rate_limit.calendar: give either calendar or unit, not both',
  'calendar-bad-period':
    "descriptors[0].rate_limit.calendar: 'quarter' is not one of day, week, month, year",
  'calendar-sliding':
    'descriptors[0].rate_limit.algorithm: a calendar window is a fixed_window, not sliding_window',
  'calendar-unknown-zone': `descriptors[0].rate_limit.time_zone: 'Mars/Olympus_Mons' is not a time zone this runtime knows (its tz database is ${process.versions.tz})`,
  'comments-only': 'empty file: expected a map with domain and descriptors',
  'descriptor-not-a-map': "descriptors[0]: must be a map, got 'tenant'",
  'descriptors-not-a-list': 'descriptors: must be a list, got a map',
  'detailed-metric-not-bool': "descriptors[0].detailed_metric: must be true or false, got 'all'",
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
  'metadata-binary':
    "descriptors[0].metadata.blob: must be a string, number, bool, null, list or map, got 'aGVsbG8='",
  'metadata-complex-key': 'descriptors[0].metadata: map keys must be strings, got a list',
  'metadata-conflict':
    'descriptors[0].rate_limit.metadata: differs from descriptors[0].metadata; give it in one place',
  'metadata-inexact-integer':
    'descriptors[0].metadata.ids[1]: 9007199254740993 is not exact as a JSON number (beyond ±2^53−1); quote it',
  'metadata-infinite-number': "descriptors[0].metadata.cost.per_call: '.inf' is not a JSON number",
  'metadata-not-a-map': "descriptors[0].metadata: must be a map, got 'payments-team'",
  'metadata-top-level':
    "metadata: unknown key 'metadata' (expected one of domain, tenant_key, descriptors)",
  'missing-domain': 'domain: is required',
  'missing-key': 'descriptors[0].key: is required',
  'missing-rpu':
    'descriptors[0].rate_limit.requests_per_unit: is required (0 denies every request)',
  'negative-rpu':
    'descriptors[0].rate_limit.requests_per_unit: must be between 0 and 4294967295, got -1',
  'no-unit-or-window': 'descriptors[0].rate_limit: needs a unit or a window',
  'non-map-document': 'expected a map with domain and descriptors, got a list',
  'overdraw-not-bool': "descriptors[0].rate_limit.overdraw: must be true or false, got 'sure'",
  'quota-mode-conflict':
    'descriptors[0].rate_limit.quota_mode: true here but false at descriptors[0].quota_mode; give it in one place',
  'quota-mode-not-bool': "descriptors[0].rate_limit.quota_mode: must be true or false, got '1'",
  'rate-limit-not-a-map': "descriptors[0].rate_limit: must be a map, got '10/s'",
  'replaces-empty-name': 'descriptors[0].rate_limit.replaces[0].name: must be a non-empty string',
  'replaces-item-not-a-map': "descriptors[1].rate_limit.replaces[0]: must be a map, got 'general'",
  'replaces-missing-name': 'descriptors[0].rate_limit.replaces[0].name: is required',
  'replaces-not-a-list': "descriptors[1].rate_limit.replaces: must be a list, got 'general'",
  'replaces-own-name':
    "descriptors[0].rate_limit.replaces[0].name: 'general' is this limit's own name",
  'replaces-unknown-key':
    "descriptors[1].rate_limit.replaces[0].domain: unknown key 'domain' (expected one of name)",
  'replaces-unknown-name':
    "descriptors[1].descriptors[0].rate_limit.replaces[1].name: no limit named 'genral' in domain 'api'",
  'replaces-unknown-name-unlimited':
    "descriptors[1].rate_limit.replaces[0].name: no limit named 'x' in domain 'api'",
  'rpu-over-uint32':
    'descriptors[0].rate_limit.requests_per_unit: must be between 0 and 4294967295, got 4294967296',
  'shadow-mode-conflict':
    'descriptors[0].rate_limit.shadow_mode: false here but true at descriptors[0].shadow_mode; give it in one place',
  'shadow-mode-not-bool': "descriptors[0].shadow_mode: must be true or false, got 'sometimes'",
  'share-threshold-on-bare-key':
    "descriptors[0].share_threshold: needs a wildcard value (one with '*')",
  'share-threshold-without-wildcard':
    "descriptors[0].share_threshold: needs a wildcard value (one with '*')",
  'string-rpu':
    "descriptors[0].rate_limit.requests_per_unit: must be an integer, got '100' (quoted, so a string)",
  'time-zone-without-calendar': 'descriptors[0].rate_limit.time_zone: is valid only with calendar',
  'token-bucket-too-fine':
    'descriptors[0].rate_limit.burst: token bucket too fine for exact integer arithmetic: ' +
    'burst 300000 × 31536000000 (window 31536000000ms / gcd with requests_per_unit) exceeds 2^52; ' +
    'use a shorter unit or window, or a smaller burst',
  'unit-and-window': 'descriptors[0].rate_limit.window: give either unit or window, not both',
  'unknown-descriptor-key':
    "descriptors[0].rate_limits: unknown key 'rate_limits' (expected one of key, value, rate_limit, " +
    'descriptors, shadow_mode, quota_mode, metadata, detailed_metric, value_to_metric, share_threshold)',
  'unknown-rate-limit-key':
    "descriptors[0].rate_limit.requests_per_second: unknown key 'requests_per_second' " +
    '(expected one of requests_per_unit, unit, window, algorithm, burst, unlimited, name, replaces, ' +
    'overdraw, calendar, time_zone, shadow_mode, quota_mode, metadata)',
  'unknown-top-key':
    "descriptor: unknown key 'descriptor' (expected one of domain, tenant_key, descriptors)",
  'unlimited-not-bool': "descriptors[0].rate_limit.unlimited: must be true or false, got 'maybe'",
  'unlimited-with-rpu':
    'descriptors[0].rate_limit.requests_per_unit: not allowed with unlimited: true',
  'unlimited-with-shadow-mode':
    'descriptors[0].rate_limit.shadow_mode: not allowed with unlimited: true',
  'unlimited-with-unit': 'descriptors[0].rate_limit.unit: not allowed with unlimited: true',
  'value-to-metric-not-bool':
    "descriptors[0].value_to_metric: must be true or false, got 'true' (quoted, so a string)",
  'window-not-a-string':
    "descriptors[0].rate_limit.window: invalid duration '30': missing unit after '30'",
  'window-too-long':
    "descriptors[0].rate_limit.window: '8785h' is longer than the longest window, 8784h",
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
      overdraw: false,
    });
    expect(root.bare.get('client')?.limit).toEqual({
      requestsPerUnit: 10,
      unit: 'second',
      windowMs: 1_000,
      algorithm: 'token_bucket',
      burst: 10,
      name: '',
      overdraw: false,
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

  it('rejects a domain defined in two files, naming both, unless merging', () => {
    expect(messageOf(() => loadRules(join(FIXTURES, 'duplicate-domains'), OPTIONS))).toBe(
      "b.yaml: domain: 'api' is already defined in a.yaml (MERGE_DOMAIN_CONFIG=true merges them)",
    );
    const off = { ...OPTIONS, mergeDomainConfig: false };
    expect(messageOf(() => loadRules(join(FIXTURES, 'merge'), off))).toBe(
      "b.yaml: domain: 'api' is already defined in a.yaml (MERGE_DOMAIN_CONFIG=true merges them)",
    );
    const merged = loadRules(join(FIXTURES, 'duplicate-domains'), MERGE);
    expect(merged.domains.get('api')).toMatchObject({ domain: 'api', file: 'a.yaml' });
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

/** The rule at a path of `[key, value]` pairs, value undefined for a bare key; throws if absent. */
function nodeAt(level: RuleLevel, ...steps: [string, string | undefined][]): RuleNode {
  let node: RuleNode | undefined;
  let at = level;
  for (const [key, value] of steps) {
    node =
      value === undefined
        ? at.bare.get(key)
        : (at.exact.get(key)?.get(value) ??
          at.wildcards.find((w) => w.key === key && w.node.value === value)?.node);
    if (node === undefined) throw new Error(`no rule ${key}=${value ?? ''}`);
    at = node.children;
  }
  if (node === undefined) throw new Error('no steps');
  return node;
}

describe('loadRules: the reference flags, metadata, replaces and overdraw', () => {
  const flags = loadRules(join(FIXTURES, 'valid/flags.yaml'), OPTIONS).domains.get('flags');
  const root = rootOf(flags);
  const auth = nodeAt(root, ['service', 'auth']);
  const users = nodeAt(root, ['service', 'auth'], ['user', 'user-*']);
  const anyUser = nodeAt(root, ['service', 'auth'], ['user', undefined]);
  const plan = nodeAt(root, ['plan', undefined]);
  const internal = nodeAt(root, ['internal', undefined]);

  it('defaults every flag to false, metadata to undefined, replaces to [] and overdraw to false', () => {
    const basic = rootOf(loadRules(join(FIXTURES, 'valid/basic.yaml'), OPTIONS).domains.get('web'));
    for (const node of rulesInFileOrder(basic)) {
      expect(node).toMatchObject({
        shadowMode: false,
        quotaMode: false,
        detailedMetric: false,
        valueToMetric: false,
        shareThreshold: false,
        metadata: undefined,
      });
      expect(node.replaces).toEqual([]);
      if (node.limit !== undefined) expect(node.limit.overdraw).toBe(false);
    }
  });

  it('links each rule to its parent, undefined at the top', () => {
    expect(auth.parent).toBeUndefined();
    expect(users.parent).toBe(auth);
    expect(anyUser.parent).toBe(auth);
    expect(plan.parent).toBeUndefined();
  });

  it("names each level's stats key part with the configured value, wildcards included", () => {
    expect(auth.metricPart).toBe('service_auth');
    expect(users.metricPart).toBe('user_user-*');
    expect(anyUser.metricPart).toBe('user');
    expect(internal.metricPart).toBe('internal');
    const basic = rootOf(loadRules(join(FIXTURES, 'valid/basic.yaml'), OPTIONS).domains.get('web'));
    expect(nodeAt(basic, ['client', 'acme'], ['status', '200']).metricPart).toBe('status_200');
  });

  it('reads the flags given on the descriptor', () => {
    expect(auth).toMatchObject({ valueToMetric: true, shadowMode: false, detailedMetric: false });
    expect(users).toMatchObject({
      shareThreshold: true,
      shadowMode: true,
      detailedMetric: true,
      valueToMetric: false,
      quotaMode: false,
    });
    expect(plan).toMatchObject({ quotaMode: true, shadowMode: false });
  });

  it('reads quota_mode, shadow_mode and metadata inside rate_limit as on the descriptor', () => {
    expect(anyUser).toMatchObject({ quotaMode: true, shadowMode: false });
    expect(plan.metadata).toEqual({ billing: true });
    expect(auth.metadata).toEqual({ team: 'identity' });
  });

  it('reads metadata as JSON values', () => {
    expect(anyUser.metadata).toEqual({
      string: 'text',
      integer: -42,
      float: 2.5,
      yes: true,
      nothing: null,
      empty: null,
      list: [1, 'two', false, ['nested']],
      map: { deep: { deeper: null } },
      since: '2024-01-31',
      quoted: '0755',
      octal: 493,
    });
  });

  it('keeps a metadata key named __proto__ as a plain key', () => {
    const dir = mkdtempSync(join(tmpdir(), 'tollgate-rules-'));
    try {
      const file = join(dir, 'proto.yaml');
      writeFileSync(
        file,
        'domain: p\ndescriptors:\n  - key: k\n    metadata: {__proto__: {polluted: true}}\n',
      );
      const metadata = rootOf(loadRules(file, OPTIONS).domains.get('p')).bare.get('k')?.metadata;
      expect(Object.keys(metadata ?? {})).toEqual(['__proto__']);
      expect(({} as Record<string, unknown>).polluted).toBeUndefined();
    } finally {
      rmSync(dir, { recursive: true });
    }
  });

  it('reads replaces as names of the rule and overdraw as a flag of the limit', () => {
    expect(anyUser.limit).toMatchObject({ name: 'any-user', overdraw: true });
    expect(anyUser.replaces).toEqual(['users', 'monthly']);
    expect(users.replaces).toEqual([]);
    expect(users.limit).toMatchObject({ overdraw: false });
  });

  it('lets an unlimited rule replace a limit', () => {
    expect(internal).toMatchObject({ unlimited: true, limit: undefined });
    expect(internal.replaces).toEqual(['monthly']);
  });

  it('lists every rule in file order, each before its children', () => {
    expect(rulesInFileOrder(root).map((node) => node.path)).toEqual([
      'descriptors[0]',
      'descriptors[0].descriptors[0]',
      'descriptors[0].descriptors[1]',
      'descriptors[1]',
      'descriptors[2]',
    ]);
  });
});

describe('loadRules: MERGE_DOMAIN_CONFIG', () => {
  const rules = loadRules(join(FIXTURES, 'merge'), MERGE);
  const api = rules.domains.get('api');
  const root = rootOf(api);

  it("adds later files' rules into the same domain, in file order", () => {
    expect([...rules.domains.keys()]).toEqual(['api', 'other']);
    expect(api).toMatchObject({ file: 'a.yaml', tenantKey: 'tenant' });
    expect(rulesInFileOrder(root).map((node) => `${node.file}:${node.path}`)).toEqual([
      'a.yaml:descriptors[0]',
      'a.yaml:descriptors[1]',
      'b.yaml:descriptors[0]',
      'b.yaml:descriptors[1]',
      'c.yaml:descriptors[0]',
    ]);
    // Wildcards keep file order across files: a.yaml's 'a*' comes before b.yaml's 'ab*'.
    expect(root.wildcards.map((w) => w.node.value)).toEqual(['a*', 'ab*']);
    expect(nodeAt(root, ['tenant', 'acme']).limit?.requestsPerUnit).toBe(30);
  });

  it('checks replaces against the whole merged domain', () => {
    expect(nodeAt(root, ['route', '/orders']).replaces).toEqual(['general']);
  });

  it('rejects a rule that another file of the domain already has, naming the later file', () => {
    expect(messageOf(() => loadRules(join(FIXTURES, 'merge-duplicate'), MERGE))).toBe(
      "b.yaml: descriptors[1]: duplicate descriptor composite key 'tenant_acme' (same as descriptors[1] in a.yaml)",
    );
  });

  it('rejects two different tenant_key values for one domain', () => {
    expect(messageOf(() => loadRules(join(FIXTURES, 'merge-tenant-key'), MERGE))).toBe(
      "c.yaml: tenant_key: 'org' differs from 'tenant' in a.yaml for the same domain 'api'",
    );
  });

  it('rejects a replaced name that no file of the domain defines', () => {
    expect(messageOf(() => loadRules(join(FIXTURES, 'merge-replaces-unknown'), MERGE))).toBe(
      "b.yaml: descriptors[0].rate_limit.replaces[0].name: no limit named 'special' in domain 'api'",
    );
  });
});

describe('loadRules: replaces are scoped to their domain', () => {
  it("rejects a name that only another domain's limit has", () => {
    expect(messageOf(() => loadRules(join(FIXTURES, 'replaces-other-domain'), OPTIONS))).toBe(
      "b.yaml: descriptors[0].rate_limit.replaces[0].name: no limit named 'shared' in domain 'two'",
    );
  });
});

describe("loadRules: COMPAT_KEYS=reference, limits the reference's keys count", () => {
  const shared = { defaultAlgorithm: 'fixed_window', referenceKeys: {} } as const;
  const write = (yaml: string) => {
    const dir = mkdtempSync(join(tmpdir(), 'tollgate-reference-keys-'));
    writeFileSync(join(dir, 'shared.yaml'), yaml);
    return join(dir, 'shared.yaml');
  };

  it('loads fixed windows of units, with the flags the reference has', () => {
    const file = write(`
domain: d
descriptors:
  - key: a
    shadow_mode: true
    rate_limit: { unit: minute, requests_per_unit: 5, name: a }
  - key: b
    rate_limit: { unlimited: true, replaces: [{ name: a }] }
`);
    expect(loadRules(file, shared).domains.get('d')).toBeDefined();
  });

  it.each([
    ['window', 'window: 30s'],
    ['algorithm', 'unit: minute, algorithm: token_bucket'],
    ['overdraw', 'unit: minute, overdraw: true'],
    ['calendar', 'calendar: month'],
  ])('refuses %s, naming the file, the path and the key', (key, fields) => {
    const file = write(`
domain: d
descriptors:
  - key: a
    rate_limit: { requests_per_unit: 5, ${fields} }
`);
    expect(messageOf(() => loadRules(file, shared))).toBe(
      `shared.yaml: descriptors[0].rate_limit.${key}: is not counted by the reference's keys ` +
        '(COMPAT_KEYS=reference): a limit there is a fixed window of a unit',
    );
    // The same file loads on tollgate's own counters.
    expect(() => loadRules(file, { defaultAlgorithm: 'fixed_window' })).not.toThrow();
  });
});
