/**
 * Validation of one parsed rules document (envoyproxy/ratelimit's format plus tollgate's
 * extensions) into `DomainRules`. It walks the YAML node tree rather than plain JS values so a
 * scalar such as `value: 200` keeps its source text, as the reference's Go decoder does.
 */

import { isMap, type Document } from 'yaml';
import { formatDuration, parseGoDuration } from '../core/duration.js';
import {
  bool,
  describe,
  fail,
  fields,
  indexAliases,
  join,
  jsonValue,
  list,
  nonEmpty,
  oneOf,
  str,
  uint32,
  type Fields,
  type NodeContext,
  type Value,
} from './readNodes.js';
import { emptyLevel, placeRule } from './level.js';
import { checkTokenBucketExact } from './tokenBucket.js';
import { CALENDAR_PERIODS, unknownZone, type Calendar } from './calendar.js';
import {
  ALGORITHMS,
  MAX_WINDOW_SECONDS,
  UNIT_SECONDS,
  type Algorithm,
  type DomainRules,
  type JsonValue,
  type Limit,
  type RuleLevel,
  type RuleNode,
  type Unit,
} from './types.js';

export interface ParseRulesOptions {
  /** The algorithm of a rate_limit without `algorithm`. */
  defaultAlgorithm: Algorithm;
  /**
   * COMPAT_KEYS=reference's settings, when it is on: the counters are the reference's own keys,
   * so a limit may ask only for what those count, a fixed window of one of its units.
   */
  referenceKeys?: object | undefined;
}

/** What the reference's counters cannot count, refused under COMPAT_KEYS=reference. */
const NOT_REFERENCE_KEYS = ['window', 'algorithm', 'burst', 'overdraw', 'calendar', 'time_zone'];

const TOP_KEYS = ['domain', 'tenant_key', 'descriptors'];
/** Flags that may stand on the descriptor or inside its rate_limit, with the same meaning. */
const SHARED_KEYS = ['shadow_mode', 'quota_mode', 'metadata'];
const DESCRIPTOR_KEYS = [
  'key',
  'value',
  'rate_limit',
  'descriptors',
  ...SHARED_KEYS,
  'detailed_metric',
  'value_to_metric',
  'share_threshold',
];
const RATE_LIMIT_KEYS = [
  'requests_per_unit',
  'unit',
  'window',
  'algorithm',
  'burst',
  'unlimited',
  'name',
  'replaces',
  'overdraw',
  'calendar',
  'time_zone',
  ...SHARED_KEYS,
];
/** What may stand beside `unlimited: true`: a name, and the limits it replaces. */
const UNLIMITED_KEYS = ['unlimited', 'name', 'replaces'];
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

/** The reference's `replaces: [{name: other}]`: non-empty names, none of them this limit's own. */
function parseReplaces(ctx: Context, node: Value, path: string, own: string): string[] {
  return list(ctx, node, path).map((item, i) => {
    const at = `${path}[${i}]`;
    const f = fields(ctx, item, at, ['name']);
    const name = nonEmpty(ctx, f.get('name'), join(at, 'name'));
    if (name === own) fail(ctx, join(at, 'name'), `'${name}' is this limit's own name`);
    return name;
  });
}

interface RateLimitBlock {
  /** Undefined for `unlimited: true`. */
  limit: Limit | undefined;
  replaces: readonly string[];
}

function parseLimit(ctx: Context, f: Fields, path: string): RateLimitBlock {
  const at = (key: string): string => join(path, key);
  if (ctx.options.referenceKeys !== undefined) {
    const foreign = NOT_REFERENCE_KEYS.find((key) => f.has(key));
    if (foreign !== undefined) {
      fail(
        ctx,
        at(foreign),
        "is not counted by the reference's keys (COMPAT_KEYS=reference): a limit there is a fixed window of a unit",
      );
    }
  }
  const name = f.has('name') ? str(ctx, f.get('name'), at('name')) : '';
  const replaces = f.has('replaces')
    ? parseReplaces(ctx, f.get('replaces'), at('replaces'), name)
    : [];
  if (f.has('unlimited') && bool(ctx, f.get('unlimited'), at('unlimited'))) {
    for (const key of f.keys()) {
      if (!UNLIMITED_KEYS.includes(key)) fail(ctx, at(key), 'not allowed with unlimited: true');
    }
    return { limit: undefined, replaces };
  }
  if (!f.has('requests_per_unit')) {
    fail(ctx, at('requests_per_unit'), 'is required (0 denies every request)');
  }
  const requestsPerUnit = uint32(ctx, f.get('requests_per_unit'), at('requests_per_unit'), 0n);
  if (f.has('unit') && f.has('window')) {
    fail(ctx, at('window'), 'give either unit or window, not both');
  }
  if (f.has('calendar') && (f.has('unit') || f.has('window'))) {
    fail(
      ctx,
      at('calendar'),
      `give either calendar or ${f.has('unit') ? 'unit' : 'window'}, not both`,
    );
  }
  if (f.has('time_zone') && !f.has('calendar')) {
    fail(ctx, at('time_zone'), 'is valid only with calendar');
  }
  let unit: Unit | undefined;
  let ms: number;
  let calendar: Calendar | undefined;
  if (f.has('calendar')) {
    const period = oneOf(ctx, f.get('calendar'), at('calendar'), CALENDAR_PERIODS);
    const zone = f.has('time_zone') ? nonEmpty(ctx, f.get('time_zone'), at('time_zone')) : 'UTC';
    const unknown = unknownZone(zone);
    if (unknown !== undefined) fail(ctx, at('time_zone'), unknown);
    calendar = { period, zone };
    unit = period;
    ms = UNIT_SECONDS[period] * 1000;
  } else if (f.has('unit')) {
    unit = oneOf(ctx, f.get('unit'), at('unit'), UNITS);
    ms = UNIT_SECONDS[unit] * 1000;
  } else if (f.has('window')) {
    ms = windowMs(ctx, f.get('window'), at('window'));
    unit = UNITS.find((u) => UNIT_SECONDS[u] * 1000 === ms);
  } else {
    fail(ctx, path, 'needs a unit or a window');
  }
  // A calendar window is a fixed window, whatever DEFAULT_ALGORITHM says.
  const algorithm = f.has('algorithm')
    ? oneOf(ctx, f.get('algorithm'), at('algorithm'), ALGORITHMS)
    : calendar
      ? 'fixed_window'
      : ctx.options.defaultAlgorithm;
  if (calendar && algorithm !== 'fixed_window') {
    fail(ctx, at('algorithm'), `a calendar window is a fixed_window, not ${algorithm}`);
  }
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
  const overdraw = f.has('overdraw') && bool(ctx, f.get('overdraw'), at('overdraw'));
  return {
    limit: {
      requestsPerUnit,
      unit,
      windowMs: ms,
      algorithm,
      burst,
      name,
      overdraw,
      ...(calendar ? { calendar } : {}),
    },
    replaces,
  };
}

/** Deep equality of two JSON values; map key order does not matter. */
function sameJson(a: JsonValue, b: JsonValue): boolean {
  if (a === b) return true;
  if (typeof a !== 'object' || typeof b !== 'object' || a === null || b === null) return false;
  if (Array.isArray(a) || Array.isArray(b)) {
    return (
      Array.isArray(a) &&
      Array.isArray(b) &&
      a.length === b.length &&
      a.every((item, i) => sameJson(item, b[i] as JsonValue))
    );
  }
  const keys = Object.keys(a);
  return (
    keys.length === Object.keys(b).length &&
    keys.every((key) => Object.hasOwn(b, key) && sameJson(a[key] as JsonValue, b[key] as JsonValue))
  );
}

/**
 * A key that may stand on the descriptor (`outer`) or inside its rate_limit (`inner`): either
 * place sets it; both places must then agree.
 */
function shared<T extends JsonValue>(
  ctx: Context,
  key: string,
  outer: { f: Fields; path: string },
  inner: { f: Fields; path: string } | undefined,
  read: (node: Value, path: string) => T,
): T | undefined {
  const outerPath = join(outer.path, key);
  const outerValue = outer.f.has(key) ? read(outer.f.get(key), outerPath) : undefined;
  if (inner === undefined || !inner.f.has(key)) return outerValue;
  const innerPath = join(inner.path, key);
  const innerValue = read(inner.f.get(key), innerPath);
  if (outerValue !== undefined && !sameJson(outerValue, innerValue)) {
    const conflict =
      typeof innerValue === 'boolean'
        ? `${innerValue} here but ${String(outerValue)} at ${outerPath}`
        : `differs from ${outerPath}`;
    fail(ctx, innerPath, `${conflict}; give it in one place`);
  }
  return innerValue;
}

function parseDescriptor(
  ctx: Context,
  node: Value,
  path: string,
  parent: RuleNode | undefined,
): RuleNode {
  const f = fields(ctx, node, path, DESCRIPTOR_KEYS);
  const at = (key: string): string => join(path, key);
  const key = nonEmpty(ctx, f.get('key'), at('key'));
  const text = f.has('value') ? str(ctx, f.get('value'), at('value')) : '';
  const value = text === '' ? undefined : text;
  const flag = (name: string): boolean => f.has(name) && bool(ctx, f.get(name), at(name));

  let block: RateLimitBlock | undefined;
  let inner: { f: Fields; path: string } | undefined;
  if (f.has('rate_limit')) {
    inner = {
      f: fields(ctx, f.get('rate_limit'), at('rate_limit'), RATE_LIMIT_KEYS),
      path: at('rate_limit'),
    };
    block = parseLimit(ctx, inner.f, inner.path);
  }
  const outer = { f, path };
  const boolean = (v: Value, p: string) => bool(ctx, v, p);
  const shadowMode = shared(ctx, 'shadow_mode', outer, inner, boolean) ?? false;
  const quotaMode = shared(ctx, 'quota_mode', outer, inner, boolean) ?? false;
  const metadata = shared(ctx, 'metadata', outer, inner, (v, p) => {
    if (!isMap(v)) fail(ctx, p, `must be a map, got ${describe(v)}`);
    return jsonValue(ctx, v, p) as Record<string, JsonValue>;
  });
  const shareThreshold = flag('share_threshold');
  if (shareThreshold && !(value?.includes('*') ?? false)) {
    fail(ctx, at('share_threshold'), "needs a wildcard value (one with '*')");
  }

  const rule: RuleNode = {
    key,
    value,
    path,
    file: ctx.file,
    limit: block?.limit,
    unlimited: block !== undefined && block.limit === undefined,
    children: emptyLevel(),
    parent,
    metricPart: value === undefined ? key : `${key}_${value}`,
    shadowMode,
    quotaMode,
    detailedMetric: flag('detailed_metric'),
    valueToMetric: flag('value_to_metric'),
    shareThreshold,
    replaces: block?.replaces ?? [],
    metadata,
  };
  rule.children = parseLevel(ctx, f.get('descriptors'), at('descriptors'), rule);
  return rule;
}

/** The rule at this level with the same key and configured value, if any. */
function sibling(level: RuleLevel, rule: RuleNode): RuleNode | undefined {
  if (rule.value === undefined) return level.bare.get(rule.key);
  if (!rule.value.includes('*')) return level.exact.get(rule.key)?.get(rule.value);
  return level.wildcards.find((w) => w.key === rule.key && w.node.value === rule.value)?.node;
}

/** Adds a rule to its level, after refusing a second rule with the same key and value. */
function addRule(ctx: Pick<NodeContext, 'file'>, level: RuleLevel, rule: RuleNode): void {
  const first = sibling(level, rule);
  if (first !== undefined) {
    const where = first.file === rule.file ? first.path : `${first.path} in ${first.file}`;
    fail(
      ctx,
      rule.path,
      `duplicate descriptor composite key '${rule.metricPart}' (same as ${where})`,
    );
  }
  placeRule(level, rule);
}

/** One `descriptors` list, indexed by the reference's precedence: exact, wildcard, bare key. */
function parseLevel(
  ctx: Context,
  node: Value,
  path: string,
  parent: RuleNode | undefined,
): RuleLevel {
  const level = emptyLevel();
  list(ctx, node, path).forEach((item, i) => {
    addRule(ctx, level, parseDescriptor(ctx, item, `${path}[${i}]`, parent));
  });
  return level;
}

/** Position of a node among its siblings in its file: the last index of its path. */
function indexOf(node: RuleNode): number {
  const match = /\[(\d+)\]$/.exec(node.path);
  return match === null ? 0 : Number(match[1]);
}

/**
 * The rules of one level in file order: by file (files load in name order), then by position in
 * the file. The index keeps exact, wildcard and bare rules apart; this puts them back in order.
 */
export function levelInFileOrder(level: RuleLevel): RuleNode[] {
  const nodes: RuleNode[] = [];
  for (const byValue of level.exact.values()) nodes.push(...byValue.values());
  for (const wildcard of level.wildcards) nodes.push(wildcard.node);
  nodes.push(...level.bare.values());
  return nodes.sort((a, b) =>
    a.file === b.file ? indexOf(a) - indexOf(b) : a.file < b.file ? -1 : 1,
  );
}

/** Every rule under `level`, depth first, each before its children, siblings in file order. */
export function rulesInFileOrder(level: RuleLevel): RuleNode[] {
  const out: RuleNode[] = [];
  const visit = (at: RuleLevel): void => {
    for (const node of levelInFileOrder(at)) {
      out.push(node);
      visit(node.children);
    }
  };
  visit(level);
  return out;
}

/**
 * MERGE_DOMAIN_CONFIG: adds the top-level rules of `from`, a later file of the same domain, into
 * `into`, in file order, as the reference does. A rule with the same key and value as one already
 * there is the duplicate-composite-key error, naming the later file.
 */
export function mergeDomain(into: DomainRules, from: DomainRules): void {
  for (const rule of levelInFileOrder(from.root)) addRule(from, into.root, rule);
}

/** Validates one parsed document; `file` is the name that prefixes every error message. */
export function parseRules(
  doc: Document.Parsed,
  file: string,
  options: ParseRulesOptions,
): DomainRules {
  const ctx: Context = { file, doc, options };
  indexAliases(ctx);
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
  return {
    domain,
    tenantKey,
    file,
    root: parseLevel(ctx, f.get('descriptors'), 'descriptors', undefined),
  };
}
