/**
 * Validation of one parsed rules document (envoyproxy/ratelimit's format plus tollgate's
 * extensions) into `DomainRules`. It walks the YAML node tree rather than plain JS values so a
 * scalar such as `value: 200` keeps its source text, as the reference's Go decoder does.
 */

import { isMap, isScalar, isSeq, type Document } from 'yaml';
import { formatDuration, parseGoDuration } from '../duration.js';
import {
  bool,
  describe,
  fail,
  fields,
  join,
  nonEmpty,
  oneOf,
  resolve,
  str,
  uint32,
  type NodeContext,
  type Value,
} from './readNodes.js';
import { checkTokenBucketExact } from './tokenBucket.js';
import {
  ALGORITHMS,
  MAX_WINDOW_SECONDS,
  UNIT_SECONDS,
  type Algorithm,
  type DomainRules,
  type Limit,
  type RuleLevel,
  type RuleNode,
  type Unit,
} from './types.js';

export interface ParseRulesOptions {
  /** The algorithm of a rate_limit without `algorithm`. */
  defaultAlgorithm: Algorithm;
}

const TOP_KEYS = ['domain', 'tenant_key', 'descriptors'];
const DESCRIPTOR_KEYS = ['key', 'value', 'rate_limit', 'descriptors'];
const RATE_LIMIT_KEYS = [
  'requests_per_unit',
  'unit',
  'window',
  'algorithm',
  'burst',
  'unlimited',
  'name',
];
const UNITS = Object.keys(UNIT_SECONDS) as Unit[];

interface Context extends NodeContext {
  options: ParseRulesOptions;
}

function windowMs(ctx: Context, node: Value, path: string): number {
  const text = str(ctx, node, path);
  let ms: number;
  try {
    ms = parseGoDuration(text);
  } catch (err) {
    fail(ctx, path, (err as Error).message);
  }
  if (ms <= 0) fail(ctx, path, `'${text}' must be longer than 0s`);
  if (ms % 1000 !== 0) fail(ctx, path, `'${text}' is not a whole number of seconds`);
  const max = MAX_WINDOW_SECONDS * 1000;
  if (ms > max) {
    fail(ctx, path, `'${text}' is longer than the longest window, ${formatDuration(max)}`);
  }
  return ms;
}

/** The rate_limit map: a resolved `Limit`, or undefined for `unlimited: true`. */
function parseLimit(ctx: Context, node: Value, path: string): Limit | undefined {
  const f = fields(ctx, node, path, RATE_LIMIT_KEYS);
  const at = (key: string): string => join(path, key);
  const name = f.has('name') ? str(ctx, f.get('name'), at('name')) : '';
  if (f.has('unlimited') && bool(ctx, f.get('unlimited'), at('unlimited'))) {
    for (const key of f.keys()) {
      if (key !== 'unlimited' && key !== 'name') {
        fail(ctx, at(key), 'not allowed with unlimited: true');
      }
    }
    return undefined;
  }
  if (!f.has('requests_per_unit')) {
    fail(ctx, at('requests_per_unit'), 'is required (0 denies every request)');
  }
  const requestsPerUnit = uint32(ctx, f.get('requests_per_unit'), at('requests_per_unit'), 0n);
  if (f.has('unit') && f.has('window')) {
    fail(ctx, at('window'), 'give either unit or window, not both');
  }
  let unit: Unit | undefined;
  let ms: number;
  if (f.has('unit')) {
    unit = oneOf(ctx, f.get('unit'), at('unit'), UNITS);
    ms = UNIT_SECONDS[unit] * 1000;
  } else if (f.has('window')) {
    ms = windowMs(ctx, f.get('window'), at('window'));
    unit = UNITS.find((u) => UNIT_SECONDS[u] * 1000 === ms);
  } else {
    fail(ctx, path, 'needs a unit or a window');
  }
  const algorithm = f.has('algorithm')
    ? oneOf(ctx, f.get('algorithm'), at('algorithm'), ALGORITHMS)
    : ctx.options.defaultAlgorithm;
  let burst = requestsPerUnit;
  if (f.has('burst')) {
    if (algorithm !== 'token_bucket') {
      fail(ctx, at('burst'), `is valid only with algorithm token_bucket, not ${algorithm}`);
    }
    burst = uint32(ctx, f.get('burst'), at('burst'), 1n);
    if (requestsPerUnit === 0) fail(ctx, at('burst'), 'burst needs requests_per_unit > 0');
  }
  if (algorithm === 'token_bucket') {
    const reason = checkTokenBucketExact(requestsPerUnit, ms, burst);
    if (reason !== undefined) fail(ctx, at(f.has('burst') ? 'burst' : 'requests_per_unit'), reason);
  }
  return { requestsPerUnit, unit, windowMs: ms, algorithm, burst, name };
}

function parseDescriptor(ctx: Context, node: Value, path: string): RuleNode {
  const f = fields(ctx, node, path, DESCRIPTOR_KEYS);
  const key = nonEmpty(ctx, f.get('key'), join(path, 'key'));
  const value = f.has('value') ? str(ctx, f.get('value'), join(path, 'value')) : '';
  const hasLimit = f.has('rate_limit');
  const limit = hasLimit
    ? parseLimit(ctx, f.get('rate_limit'), join(path, 'rate_limit'))
    : undefined;
  return {
    key,
    value: value === '' ? undefined : value,
    path,
    file: ctx.file,
    limit,
    unlimited: hasLimit && limit === undefined,
    children: parseLevel(ctx, f.get('descriptors'), join(path, 'descriptors')),
  };
}

/** One `descriptors` list, indexed by the reference's precedence: exact, wildcard, bare key. */
function parseLevel(ctx: Context, node: Value, path: string): RuleLevel {
  const level: RuleLevel = { exact: new Map(), wildcards: [], bare: new Map() };
  if (node == null || (isScalar(node) && node.value === null)) return level;
  if (!isSeq(node)) fail(ctx, path, `must be a list, got ${describe(node)}`);
  const seen = new Map<string, string>();
  node.items.forEach((item, i) => {
    const rule = parseDescriptor(ctx, resolve(ctx, item), `${path}[${i}]`);
    const composite = rule.value === undefined ? rule.key : `${rule.key}_${rule.value}`;
    const id = JSON.stringify([rule.key, rule.value ?? null]);
    const first = seen.get(id);
    if (first !== undefined) {
      fail(ctx, rule.path, `duplicate descriptor composite key '${composite}' (same as ${first})`);
    }
    seen.set(id, rule.path);
    if (rule.value === undefined) {
      level.bare.set(rule.key, rule);
    } else if (rule.value.includes('*')) {
      level.wildcards.push({ key: rule.key, parts: rule.value.split('*'), node: rule });
    } else {
      const byValue = level.exact.get(rule.key) ?? new Map<string, RuleNode>();
      level.exact.set(rule.key, byValue.set(rule.value, rule));
    }
  });
  return level;
}

/** Validates one parsed document; `file` is the name that prefixes every error message. */
export function parseRules(
  doc: Document.Parsed,
  file: string,
  options: ParseRulesOptions,
): DomainRules {
  const ctx: Context = { file, doc, options };
  const contents = doc.contents;
  if (contents === null) fail(ctx, '', 'empty file: expected a map with domain and descriptors');
  if (!isMap(contents)) {
    fail(ctx, '', `expected a map with domain and descriptors, got ${describe(contents)}`);
  }
  const f = fields(ctx, contents, '', TOP_KEYS);
  const domain = nonEmpty(ctx, f.get('domain'), 'domain');
  const tenantKey = f.has('tenant_key')
    ? nonEmpty(ctx, f.get('tenant_key'), 'tenant_key')
    : undefined;
  return { domain, tenantKey, file, root: parseLevel(ctx, f.get('descriptors'), 'descriptors') };
}
