import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { Check, Descriptor } from '../../../src/core/check.js';
import { loadRules } from '../../../src/rules/loadRules.js';
import type { RuleSet } from '../../../src/rules/types.js';

/** The rules the decision's unit tests plan against, loaded as the service loads a file. */
export const RULES = `
domain: api
descriptors:
  - key: route
    rate_limit: {name: route, unit: minute, requests_per_unit: 10, algorithm: fixed_window}
  - key: also_route
    rate_limit: {name: also, unit: minute, requests_per_unit: 4, algorithm: fixed_window}
  - key: bucket
    rate_limit: {name: bucket, unit: minute, requests_per_unit: 10, algorithm: token_bucket, burst: 5}
  - key: soft
    shadow_mode: true
    rate_limit: {name: soft, unit: second, requests_per_unit: 1, algorithm: fixed_window}
  - key: pool_a
    quota_mode: true
    rate_limit: {name: pool_a, unit: minute, requests_per_unit: 1, algorithm: fixed_window}
  - key: pool_b
    quota_mode: true
    rate_limit: {name: pool_b, unit: hour, requests_per_unit: 1, algorithm: fixed_window}
  - key: free
    rate_limit: {unlimited: true}
  - key: vip
    rate_limit:
      name: vip
      unit: minute
      requests_per_unit: 100
      replaces:
        - name: route
  - key: tagged
    metadata: {team: billing}
    rate_limit: {name: tagged, unit: second, requests_per_unit: 3, algorithm: fixed_window}
  - key: nothing
`;

export function load(yaml = RULES): RuleSet {
  const path = join(mkdtempSync(join(tmpdir(), 'tollgate-decision-')), 'rules.yaml');
  writeFileSync(path, yaml);
  return loadRules(path, { defaultAlgorithm: 'sliding_window' });
}

/** A descriptor of one entry, or of several: `d('route', '/a')`, `d('k1', 'v1', 'k2', 'v2')`. */
export function d(...keysAndValues: string[]): Descriptor {
  const entries = [];
  for (let i = 0; i < keysAndValues.length; i += 2) {
    entries.push({ key: keysAndValues[i] as string, value: keysAndValues[i + 1] as string });
  }
  return { entries };
}

export function check(...descriptors: Descriptor[]): Check {
  return { domain: 'api', descriptors, hitsAddend: 0 };
}
