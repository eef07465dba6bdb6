import { readFileSync } from 'node:fs';
import { describe, expect, it } from 'vitest';
import { parse } from 'yaml';
import type { Entry } from '../../src/core/check.js';
import { loadRules } from '../../src/rules/loadRules.js';
import { matchRule } from '../../src/rules/match.js';
import { bucketPath } from '../../src/rlqs/buckets.js';

// envoy/rlqs.yaml is an ordinary tollgate rules file, and envoy/envoy-rlqs.yaml builds the
// buckets that are matched against it. The buckets are read from the Envoy config itself, so a
// bucket whose keys no rule holds, or a domain that the rules do not define, fails here.

const OPTIONS = { defaultAlgorithm: 'sliding_window' } as const;
const TENANT = 'acme'; // the x-tenant-id header of the requests

interface ValueBuilder {
  string_value?: string;
  custom_value?: { typed_config: { header_name: string } };
}
interface BucketAction {
  action: {
    typed_config: { bucket_id_builder: { bucket_id_builder: Record<string, ValueBuilder> } };
  };
}
interface QuotaFilter {
  domain: string;
  bucket_matchers: {
    matcher_list: { matchers: { on_match: BucketAction }[] };
    on_no_match: BucketAction;
  };
}

function quotaFilter(): QuotaFilter {
  const bootstrap = parse(readFileSync('envoy/envoy-rlqs.yaml', 'utf8')) as {
    static_resources: {
      listeners: {
        filter_chains: {
          filters: { typed_config: { http_filters: { name: string; typed_config: unknown }[] } }[];
        }[];
      }[];
    };
  };
  const hcm = bootstrap.static_resources.listeners[0]?.filter_chains[0]?.filters[0];
  const filter = hcm?.typed_config.http_filters.find(
    (f) => f.name === 'envoy.filters.http.rate_limit_quota',
  );
  if (filter === undefined) throw new Error('envoy-rlqs.yaml has no rate_limit_quota filter');
  return filter.typed_config as QuotaFilter;
}

/** A bucket as Envoy builds it for a request that carries x-tenant-id: TENANT. */
function bucketOf({ action }: BucketAction): Record<string, string> {
  const bucket: Record<string, string> = {};
  for (const [key, builder] of Object.entries(
    action.typed_config.bucket_id_builder.bucket_id_builder,
  )) {
    expect(builder.custom_value?.typed_config.header_name ?? 'x-tenant-id').toBe('x-tenant-id');
    bucket[key] = builder.string_value ?? TENANT;
  }
  return bucket;
}

/** The bucket's entries in the order the tree is walked: the tenant first, then the rest. */
const entriesOf = (bucket: Record<string, string>): Entry[] =>
  Object.entries(bucket)
    .sort(([a], [b]) => (a === 'tenant' ? -1 : b === 'tenant' ? 1 : a.localeCompare(b)))
    .map(([key, value]) => ({ key, value }));

describe('envoy/rlqs.yaml, the rules behind envoy/envoy-rlqs.yaml', () => {
  const filter = quotaFilter();
  const rules = loadRules('envoy/rlqs.yaml', OPTIONS).domains.get(filter.domain);

  it("loads as tollgate rules, for the filter's domain, the tenant first", () => {
    expect(rules).toMatchObject({ domain: 'edge-quota', tenantKey: 'tenant' });
    const tenant = rules && matchRule(rules, entriesOf({ tenant: TENANT }));
    expect(tenant?.limit).toMatchObject({
      name: 'tenant-quota',
      algorithm: 'token_bucket',
      unit: 'minute',
      requestsPerUnit: 1000,
      burst: 100,
    });
  });

  it('gives every bucket that the filter builds the rules on its path, the tenant first', () => {
    const { matcher_list, on_no_match } = filter.bucket_matchers;
    const buckets = [...matcher_list.matchers.map((m) => m.on_match), on_no_match].map(bucketOf);
    expect(buckets).toEqual([
      { tenant: TENANT, route: 'orders' },
      { tenant: TENANT, route: 'search' },
      { tenant: TENANT },
    ]);
    const met = buckets.map((bucket) =>
      bucketPath(rules!, bucket)?.descriptors.map((d) => matchRule(rules!, d.entries)?.limit?.name),
    );
    expect(met).toEqual([
      ['tenant-quota', 'tenant-orders-quota'],
      ['tenant-quota', 'tenant-search-quota'],
      ['tenant-quota'],
    ]);
  });

  it('meets no rule with a bucket that lacks the tenant, as an empty x-tenant-id builds', () => {
    expect(rules && matchRule(rules, entriesOf({ route: 'orders' }))).toBeUndefined();
    expect(bucketPath(rules!, { route: 'orders' })).toBeUndefined();
  });
});
