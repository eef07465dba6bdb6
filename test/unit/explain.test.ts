import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import fc from 'fast-check';
import { afterAll, describe, expect, it } from 'vitest';
import type { Entry } from '../../src/core/check.js';
import { explainMatch } from '../../src/rules/explain.js';
import { loadRules } from '../../src/rules/loadRules.js';
import { matchRule } from '../../src/rules/match.js';
import type { DomainRules } from '../../src/rules/types.js';

// Exact, wildcard and bare keys at two levels, rules with and without a limit at each, and a
// pattern whose middle part must not overlap its end ('xa' is not 'x*a*a').
const RULES = `
domain: test
descriptors:
  - key: tenant
    value: acme
    rate_limit: {unit: minute, requests_per_unit: 600, algorithm: token_bucket, burst: 50}
    descriptors:
      - key: route
        value: /orders
        rate_limit: {requests_per_unit: 100, window: 30s, name: orders}
      - key: route
        value: '/api*'
        rate_limit: {unit: second, requests_per_unit: 5, algorithm: fixed_window}
      - key: route
        value: 'x*a*a'
        rate_limit: {unit: second, requests_per_unit: 6}
      - key: route
        rate_limit: {unlimited: true}
  - key: tenant
    value: 'ac*'
    descriptors:
      - key: route
        value: '*/x'
        rate_limit: {unit: hour, requests_per_unit: 7}
  - key: tenant
    value: '*e'
    rate_limit: {unit: second, requests_per_unit: 3}
  - key: tenant
    rate_limit: {unit: second, requests_per_unit: 10}
    descriptors:
      - key: route
        value: /orders
      - key: route
        rate_limit: {unit: day, requests_per_unit: 1000}
  - key: route
    value: /health
    rate_limit: {unlimited: true}
`;

const dir = mkdtempSync(join(tmpdir(), 'tollgate-explain-'));
afterAll(() => rmSync(dir, { recursive: true }));

function load(yaml: string): DomainRules {
  const file = join(dir, 'rules.yaml');
  writeFileSync(file, yaml);
  const loaded = loadRules(file, { defaultAlgorithm: 'sliding_window' }).domains.get('test');
  if (loaded === undefined) throw new Error('no domain test');
  return loaded;
}
const rules = load(RULES);

const entries = (...pairs: [string, string][]): Entry[] =>
  pairs.map(([key, value]) => ({ key, value }));

describe('explainMatch', () => {
  it('records each rule tried, in precedence order, and where the match is', () => {
    const { steps, node, reason } = explainMatch(
      rules,
      entries(['tenant', 'acorn'], ['route', 'a/x']),
    );
    expect(steps.map((step) => step.attempts)).toEqual([
      [
        { kind: 'exact', value: 'acorn', rule: undefined, matched: false },
        { kind: 'wildcard', value: 'ac*', rule: 'rules.yaml descriptors[1]', matched: true },
      ],
      [
        { kind: 'exact', value: 'a/x', rule: undefined, matched: false },
        {
          kind: 'wildcard',
          value: '*/x',
          rule: 'rules.yaml descriptors[1].descriptors[0]',
          matched: true,
        },
      ],
    ]);
    expect(steps.map((step) => step.matchedBy)).toEqual(['wildcard', 'wildcard']);
    expect(node?.path).toBe('descriptors[1].descriptors[0]');
    expect(reason).toBe(
      'limited by rules.yaml descriptors[1].descriptors[0]: ' +
        'requests_per_unit=7 unit=hour algorithm=sliding_window',
    );
  });

  it('falls through wildcards that do not match to the bare key', () => {
    const { steps, reason } = explainMatch(rules, entries(['tenant', 'bob']));
    expect(steps[0]?.attempts).toEqual([
      { kind: 'exact', value: 'bob', rule: undefined, matched: false },
      { kind: 'wildcard', value: 'ac*', rule: 'rules.yaml descriptors[1]', matched: false },
      { kind: 'wildcard', value: '*e', rule: 'rules.yaml descriptors[2]', matched: false },
      { kind: 'bare', value: undefined, rule: 'rules.yaml descriptors[3]', matched: true },
    ]);
    expect(reason).toBe(
      'limited by rules.yaml descriptors[3]: requests_per_unit=10 unit=second algorithm=sliding_window',
    );
  });

  it('describes windows, bursts and names', () => {
    expect(explainMatch(rules, entries(['tenant', 'acme'])).reason).toBe(
      'limited by rules.yaml descriptors[0]: ' +
        'requests_per_unit=600 unit=minute algorithm=token_bucket burst=50',
    );
    expect(explainMatch(rules, entries(['tenant', 'acme'], ['route', '/orders'])).reason).toBe(
      'limited by rules.yaml descriptors[0].descriptors[0]: ' +
        'requests_per_unit=100 window=30s algorithm=sliding_window name="orders"',
    );
  });

  it('says why no limit applies', () => {
    const reason = (...pairs: [string, string][]) => explainMatch(rules, entries(...pairs)).reason;
    expect(reason(['tenant', 'acme'], ['route', '/anything'])).toBe(
      'unlimited by rules.yaml descriptors[0].descriptors[3]: never limited, no counter',
    );
    expect(reason(['tenant', 'acorn'])).toBe(
      'no rule: the descriptor is shorter than the rules; ' +
        'rules.yaml descriptors[1] has no rate_limit, only nested descriptors',
    );
    expect(reason(['tenant', 'bob'], ['route', '/orders'])).toBe(
      'no rule: rules.yaml descriptors[3].descriptors[0] has no rate_limit',
    );
    expect(reason(['tenant', 'acorn'], ['route', '/y'])).toBe(
      'no rule: nothing matches entry 2 (route=/y) under rules.yaml descriptors[1]',
    );
    expect(reason(['tenant', 'mike'], ['route', '/a'])).toBe(
      'no rule: the descriptor is longer than the rules; ' +
        'rules.yaml descriptors[2] has no nested descriptors for entry 2 (route=/a)',
    );
    expect(reason(['user', 'x'])).toBe('no rule: nothing matches entry 1 (user=x)');
    expect(reason()).toBe('the descriptor has no entries');
  });
});

describe('explainMatch agrees with matchRule', () => {
  // Values near the rules' own, so that most walks reach the second level and its wildcards.
  const VALUES = {
    tenant: ['acme', 'acorn', 'ac', 'mike', 'e', 'bob', ''],
    route: ['/orders', '/api', '/api/v1', 'a/x', '/x', '/health', 'xa', 'xaa', 'x*a*a', '*'],
    user: ['acme', '/orders'],
  };
  const randomValue = fc.string({
    maxLength: 6,
    unit: fc.constantFrom('a', 'c', 'e', 'm', '/', 'x', '*'),
  });
  const entry = (key: keyof typeof VALUES): fc.Arbitrary<Entry> =>
    fc.record({
      key: fc.constant(key),
      value: fc.oneof(
        { arbitrary: fc.constantFrom(...VALUES[key]), weight: 4 },
        { arbitrary: randomValue, weight: 1 },
      ),
    });
  /** Entries at position i favour the key the rules expect there. */
  const at = (expected: keyof typeof VALUES) =>
    fc.oneof(
      { arbitrary: entry(expected), weight: 4 },
      { arbitrary: entry('tenant'), weight: 1 },
      { arbitrary: entry('route'), weight: 1 },
      { arbitrary: entry('user'), weight: 1 },
    );
  const descriptor = fc
    .tuple(at('tenant'), at('route'), at('route'), fc.nat(3))
    .map(([first, second, third, length]) => [first, second, third].slice(0, length));

  it('lands on the same node for any entries', () => {
    fc.assert(
      fc.property(descriptor, (random) => {
        const explained = explainMatch(rules, random);
        expect(explained.node).toBe(matchRule(rules, random));
        if (explained.node !== undefined) expect(explained.steps.at(-1)?.node).toBe(explained.node);
      }),
      { numRuns: 5_000 },
    );
  });
});
