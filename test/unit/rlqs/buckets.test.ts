// An RLQS bucket is an unordered map; the rule tree puts it in order. Each case is a rules file,
// a bucket, and the rules the bucket meets (by their names), or none.
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { ownCounting } from '../../../src/decision/counting.js';
import { planCheck } from '../../../src/decision/plan.js';
import { ruleQuota } from '../../../src/decision/quota.js';
import { loadRules } from '../../../src/rules/loadRules.js';
import { matchRule } from '../../../src/rules/match.js';
import type { RuleSet } from '../../../src/rules/types.js';
import { bucketCheck, bucketName, bucketPath, type Bucket } from '../../../src/rlqs/buckets.js';

const dir = mkdtempSync(join(tmpdir(), 'tollgate-rlqs-buckets-'));
afterAll(() => rmSync(dir, { recursive: true }));

function load(yaml: string): RuleSet {
  const file = join(dir, `rules-${Math.random().toString(36).slice(2)}.yaml`);
  writeFileSync(file, yaml);
  return loadRules(file, { defaultAlgorithm: 'fixed_window' });
}

const limit = (name: string, perMinute = 60): string =>
  `rate_limit: {name: ${name}, unit: minute, requests_per_unit: ${perMinute}}`;

const tenants = load(`
domain: quota
tenant_key: tenant
descriptors:
  - key: tenant
    ${limit('tenant', 1000)}
    descriptors:
      - key: route
        value: orders
        ${limit('orders', 100)}
      - key: route
        value: "search*"
        shadow_mode: true
        ${limit('search', 10)}
      - key: route
        value: health
        rate_limit: {unlimited: true}
      - key: plan
        value: gold
        ${limit('gold', 5000)}
        descriptors:
          - key: route
            ${limit('gold-route', 500)}
  - key: tenant
    value: internal
    rate_limit: {unlimited: true}
`);
const domain = tenants.domains.get('quota')!;

/**
 * The names of the rules a bucket meets, shallowest first; undefined when it meets none. The
 * walk's own rule for each level is the one a classic match of that descriptor finds.
 */
function met(bucket: Bucket): (string | undefined)[] | undefined {
  const path = bucketPath(domain, bucket);
  return path?.descriptors.map((descriptor, at) => {
    const node = path.nodes[at];
    expect(node).toBe(matchRule(domain, descriptor.entries));
    return node?.unlimited ? 'unlimited' : node?.limit?.name;
  });
}

describe('an RLQS bucket against the rule tree', () => {
  it('takes the tenant first, then the key the next level holds, whatever the map order', () => {
    expect(met({ route: 'orders', tenant: 'acme' })).toEqual(['tenant', 'orders']);
    expect(met({ tenant: 'acme', route: 'orders' })).toEqual(['tenant', 'orders']);
    expect(bucketPath(domain, { route: 'orders', tenant: 'acme' })?.entries).toEqual([
      { key: 'tenant', value: 'acme' },
      { key: 'route', value: 'orders' },
    ]);
  });

  it('meets every level of its path that has a rule, as per-level descriptors do', () => {
    expect(met({ tenant: 'acme' })).toEqual(['tenant']);
    expect(met({ tenant: 'acme', plan: 'gold', route: 'x' })).toEqual([
      'tenant',
      'gold',
      'gold-route',
    ]);
  });

  it('keeps the classic precedence: exact value, wildcard, bare key', () => {
    expect(met({ tenant: 'internal' })).toEqual(['unlimited']);
    expect(met({ tenant: 'acme', route: 'search-v2' })).toEqual(['tenant', 'search']);
    expect(met({ tenant: 'acme', route: 'health' })).toEqual(['tenant', 'unlimited']);
  });

  it('matches no rule when a key fits no path, or the tenant is missing', () => {
    expect(met({ tenant: 'acme', route: 'cart' })).toBeUndefined();
    expect(met({ tenant: 'acme', region: 'eu' })).toBeUndefined();
    expect(met({ route: 'orders' })).toBeUndefined();
    expect(met({})).toBeUndefined();
  });

  it("plans the classic check's counters, with shadow, unlimited and replaces as there", () => {
    const policy = {
      keyPrefix: 'p_',
      defaultAlgorithm: 'fixed_window' as const,
      counting: ownCounting,
      quota: ruleQuota,
    };
    // As a session plans a bucket: on the rules its walk found, which match as a classic check's.
    const plan = (bucket: Bucket, hits = 1) => {
      const path = bucketPath(domain, bucket)!;
      const planned = planCheck(bucketCheck('quota', path, hits), tenants, policy, path.nodes);
      expect(planned).toEqual(planCheck(bucketCheck('quota', path, hits), tenants, policy));
      return planned;
    };
    const search = plan({ tenant: 'acme', route: 'search-1' }, 7);
    expect(search.counters.map((counter) => [counter.limit, counter.shadow, counter.cost])).toEqual(
      [
        [1000, false, 7],
        [10, true, 7],
      ],
    );
    expect(plan({ tenant: 'acme', route: 'health' }).counters.map((c) => c.limit)).toEqual([1000]);

    const replacing = load(`
domain: quota
descriptors:
  - key: tenant
    ${limit('tenant', 1000)}
    descriptors:
      - key: route
        value: bulk
        rate_limit:
          {name: bulk, unit: minute, requests_per_unit: 5000, replaces: [{name: tenant}]}
`);
    const path = bucketPath(replacing.domains.get('quota')!, { route: 'bulk', tenant: 'a' })!;
    const counters = planCheck(
      bucketCheck('quota', path, 1),
      replacing,
      policy,
      path.nodes,
    ).counters;
    expect(counters.map((counter) => counter.limit)).toEqual([5000]);
  });

  it('names a bucket the same whatever the order of its map', () => {
    expect(bucketName({ b: '2', a: '1' })).toBe(bucketName({ a: '1', b: '2' }));
    expect(bucketName({ a: '1', b: '2' })).not.toBe(bucketName({ a: '1', b: '3' }));
  });
});
