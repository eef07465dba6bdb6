/**
 * From an RLQS bucket to the rules it meets. A `BucketId` is an unordered map, where a classic
 * descriptor is an ordered list of entries, so the bucket is put in order by the rule tree
 * itself: at each level the walk takes the rule key that the bucket holds (the domain's
 * `tenant_key` at the first level, when the rules name one), with the classic precedence for its
 * value (exact, then the first wildcard in file order, then the bare key).
 *
 * A bucket stands for a stream of requests, as the descriptors Envoy sends per level do for one
 * request: every level of its path that has a rule (a limit, or `unlimited`) becomes one
 * descriptor, so a bucket {tenant: acme, route: orders} meets both the tenant's limit and the
 * route's, and `replaces`, `shadow_mode` and `unlimited` act as in a classic check of those
 * descriptors. A bucket matches no rule when one of its keys is left over by the walk, as a
 * classic descriptor deeper than the rules matches nothing.
 */
import type { Check, Descriptor, Entry } from '../core/check.js';
import { matchLevel } from '../rules/match.js';
import type { DomainRules, RuleLevel, RuleNode } from '../rules/types.js';

const nodeFor = (level: RuleLevel, key: string, value: string): RuleNode | undefined =>
  matchLevel(level, { key, value });

export type Bucket = Readonly<Record<string, string>>;

/** The bucket's entries in rule order, and the rules its path meets; undefined for no match. */
export interface BucketPath {
  entries: readonly Entry[];
  /** One descriptor per level of the path that holds a rule, shallowest first. */
  descriptors: Descriptor[];
  /** The rule each descriptor matches, found by the walk: planCheck need not match it again. */
  nodes: RuleNode[];
}

/** The rule keys of a level, in the order the walk tries them: exact, wildcard, bare. */
function* levelKeys(level: RuleLevel): Generator<string> {
  yield* level.exact.keys();
  for (const wildcard of level.wildcards) yield wildcard.key;
  yield* level.bare.keys();
}

export function bucketPath(rules: DomainRules, bucket: Bucket): BucketPath | undefined {
  const keys = Object.keys(bucket);
  const left = new Set(keys);
  const entries: Entry[] = [];
  const descriptors: Descriptor[] = [];
  const nodes: RuleNode[] = [];
  let level = rules.root;
  while (left.size > 0) {
    let step: { key: string; node: RuleNode } | undefined;
    if (entries.length === 0 && rules.tenantKey !== undefined) {
      const key = rules.tenantKey;
      const node = left.has(key) ? nodeFor(level, key, bucket[key] as string) : undefined;
      step = node && { key, node };
    } else {
      for (const key of levelKeys(level)) {
        if (!left.has(key)) continue;
        const node = nodeFor(level, key, bucket[key] as string);
        if (node !== undefined) {
          step = { key, node };
          break;
        }
      }
    }
    if (step === undefined) return undefined;
    left.delete(step.key);
    entries.push({ key: step.key, value: bucket[step.key] as string });
    if (step.node.limit !== undefined || step.node.unlimited) {
      descriptors.push({ entries: entries.slice() });
      nodes.push(step.node);
    }
    level = step.node.children;
  }
  return descriptors.length === 0 ? undefined : { entries, descriptors, nodes };
}

/** The classic check a bucket's path makes, costing `hits` on each of its descriptors. */
export function bucketCheck(domain: string, path: BucketPath, hits: number): Check {
  return { domain, descriptors: path.descriptors, hitsAddend: hits };
}

/** A stable name for a bucket: its entries sorted by key, for maps and the store's keys. */
export function bucketName(bucket: Bucket): string {
  return JSON.stringify(
    Object.keys(bucket)
      .sort()
      .map((key) => [key, bucket[key]]),
  );
}
