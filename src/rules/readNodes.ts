/**
 * Typed readers over YAML nodes. Each one rejects what it cannot read with a `RulesError` that
 * names the file, the path in the file and the key.
 */

import { isAlias, isMap, isScalar, isSeq, visit, type Document, type Node } from 'yaml';
import { RulesError } from '../core/errors.js';
import type { JsonValue } from './types.js';

const UINT32_MAX = 4_294_967_295n;

export type Value = Node | null | undefined;
export type Fields = ReadonlyMap<string, Value>;

/** What every reader needs: the file name for messages and the document for aliases. */
export interface NodeContext {
  file: string;
  doc: Document.Parsed;
  /** Aliases followed so far in this file (see MAX_ALIASES), and where each one leads. */
  aliases?: { followed: number; targets: Map<object, Value> };
  /** Nodes read so far, aliases expanded (see MAX_EXPANDED_NODES). */
  expanded?: { nodes: number };
}

/**
 * Aliases a file may follow. Each alias is read again wherever it is used, so aliases of aliases
 * grow a file exponentially (the "billion laughs"); real rules files follow a handful.
 */
export const MAX_ALIASES = 10_000;

/**
 * Nodes a file may expand to, its aliases read wherever they are used. An alias of a large list
 * under many siblings multiplies it without nesting aliases (1,000 aliases of 1,000 rules is a
 * million rules, from 112 KB). The largest file allowed, 4 MiB of plain rules, reads about 8 nodes
 * a rule: some 440,000 for its 54,000 rules.
 */
export const MAX_EXPANDED_NODES = 1_000_000;

/** Counts `count` more nodes read, and refuses the file once it has read too many. */
function spend(ctx: NodeContext, count: number): void {
  const expanded = (ctx.expanded ??= { nodes: 0 });
  expanded.nodes += count;
  if (expanded.nodes > MAX_EXPANDED_NODES) {
    // Rules from xDS, or a file without aliases, are simply too many: no alias is to blame.
    const why =
      (ctx.aliases?.followed ?? 0) > 0
        ? `expands to more than ${MAX_EXPANDED_NODES} YAML nodes once its aliases are read where ` +
          'they are used; write fewer aliases of large lists, or split the file'
        : `holds more than ${MAX_EXPANDED_NODES} nodes (rules, their keys and values); split it`;
    fail(ctx, '', why);
  }
}

/**
 * Finds every alias's anchor in one walk of the document, in order, where yaml would walk the
 * whole document again for each alias. Refuses more than MAX_ALIASES aliases, and an alias inside
 * the very node it names, which no reader could ever finish.
 */
export function indexAliases(ctx: NodeContext): void {
  const anchors = new Map<string, Node>();
  const targets = new Map<object, Value>();
  visit(ctx.doc, {
    Node(_, node, path) {
      if (isAlias(node)) {
        if (targets.size >= MAX_ALIASES) {
          fail(ctx, '', `has more than ${MAX_ALIASES} aliases; expand them, or use fewer`);
        }
        const target = anchors.get(node.source);
        if (target !== undefined && path.includes(target)) {
          fail(ctx, '', `alias *${node.source} is inside the node it names, which never ends`);
        }
        targets.set(node, target ?? null);
        return;
      }
      if (node.anchor) anchors.set(node.anchor, node);
    },
  });
  ctx.aliases = { followed: 0, targets };
}

export const join = (path: string, key: string): string => (path === '' ? key : `${path}.${key}`);

export function fail(ctx: Pick<NodeContext, 'file'>, path: string, message: string): never {
  throw new RulesError(`${ctx.file}: ${path === '' ? '' : `${path}: `}${message}`);
}

/** Follows `*anchor` references so aliased nodes validate like inline ones. */
export function resolve(ctx: NodeContext, node: unknown): Value {
  if (!isAlias(node)) return node as Value;
  const aliases = (ctx.aliases ??= { followed: 0, targets: new Map() });
  if (++aliases.followed > MAX_ALIASES) {
    fail(ctx, '', `follows more than ${MAX_ALIASES} aliases; expand them, or use fewer`);
  }
  // Found by indexAliases; yaml itself would walk the whole document for each alias.
  let target = aliases.targets.get(node);
  if (target === undefined) {
    target = node.resolve(ctx.doc) ?? null;
    aliases.targets.set(node, target);
  }
  return target;
}

export function describe(node: Value): string {
  if (isMap(node)) return 'a map';
  if (isSeq(node)) return 'a list';
  if (!isScalar(node)) return 'nothing';
  const text = `'${node.source ?? String(node.value)}'`;
  // A quoted '100' or 'true' would otherwise read like the number or bool it is not.
  const quoted = node.type === 'QUOTE_SINGLE' || node.type === 'QUOTE_DOUBLE';
  return quoted ? `${text} (quoted, so a string)` : text;
}

/** A map key as written: the source text, so a YAML merge key reads as '<<', not its symbol. */
function keyText(key: unknown): string {
  return isScalar(key) ? (key.source ?? String(key.value)) : String(key);
}

/** The map's entries by key, after rejecting every key outside `allowed`. */
export function fields(
  ctx: NodeContext,
  node: Value,
  path: string,
  allowed: readonly string[],
): Fields {
  if (!isMap(node)) fail(ctx, path, `must be a map, got ${describe(node)}`);
  spend(ctx, node.items.length);
  const out = new Map<string, Value>();
  for (const pair of node.items) {
    const key = keyText(pair.key);
    if (!allowed.includes(key)) {
      fail(ctx, join(path, key), `unknown key '${key}' (expected one of ${allowed.join(', ')})`);
    }
    out.set(key, resolve(ctx, pair.value));
  }
  return out;
}

/** Any scalar as its text, as Go decodes `value: 200` into a string; null is "". */
export function str(ctx: NodeContext, node: Value, path: string): string {
  if (node === null) return '';
  if (!isScalar(node)) fail(ctx, path, `must be a string, got ${describe(node)}`);
  if (node.value === null) return '';
  return typeof node.value === 'string' ? node.value : (node.source ?? String(node.value));
}

export function nonEmpty(ctx: NodeContext, node: Value, path: string): string {
  if (node === undefined) fail(ctx, path, 'is required');
  const text = str(ctx, node, path);
  if (text === '') fail(ctx, path, 'must be a non-empty string');
  return text;
}

/** Integers arrive as bigint (`intAsBigInt`), so `1.5` and `1.0` are floats and rejected. */
export function uint32(ctx: NodeContext, node: Value, path: string, min: bigint): number {
  if (!isScalar(node) || typeof node.value !== 'bigint') {
    fail(ctx, path, `must be an integer, got ${describe(node)}`);
  }
  if (node.value < min || node.value > UINT32_MAX) {
    fail(ctx, path, `must be between ${min} and ${UINT32_MAX}, got ${node.value}`);
  }
  return Number(node.value);
}

export function bool(ctx: NodeContext, node: Value, path: string): boolean {
  if (!isScalar(node) || typeof node.value !== 'boolean') {
    fail(ctx, path, `must be true or false, got ${describe(node)}`);
  }
  return node.value;
}

export function oneOf<T extends string>(
  ctx: NodeContext,
  node: Value,
  path: string,
  allowed: readonly T[],
): T {
  const text = str(ctx, node, path);
  const found = allowed.find((a) => a === text.toLowerCase());
  if (found === undefined) fail(ctx, path, `'${text}' is not one of ${allowed.join(', ')}`);
  return found;
}

/** A list's items, aliases resolved; a missing or null list is empty. */
export function list(ctx: NodeContext, node: Value, path: string): Value[] {
  if (node == null || (isScalar(node) && node.value === null)) return [];
  if (!isSeq(node)) fail(ctx, path, `must be a list, got ${describe(node)}`);
  spend(ctx, node.items.length);
  return node.items.map((item) => resolve(ctx, item));
}

/**
 * A JSON-like value: a string, a number, a bool, null, or lists and maps of them. Integers must
 * be exact as JSON numbers; a YAML 1.1 timestamp keeps its text, as Go reads it into a string.
 */
export function jsonValue(ctx: NodeContext, node: Value, path: string): JsonValue {
  spend(ctx, 1);
  if (node == null) return null;
  if (isMap(node)) {
    const entries: [string, JsonValue][] = [];
    for (const pair of node.items) {
      if (!isScalar(pair.key))
        fail(ctx, path, `map keys must be strings, got ${describe(pair.key as Value)}`);
      const key = keyText(pair.key);
      entries.push([key, jsonValue(ctx, resolve(ctx, pair.value), join(path, key))]);
    }
    // fromEntries defines own properties, so a key such as '__proto__' stays a plain key.
    return Object.fromEntries(entries);
  }
  if (isSeq(node)) {
    return node.items.map((item, i) => jsonValue(ctx, resolve(ctx, item), `${path}[${i}]`));
  }
  if (!isScalar(node)) fail(ctx, path, `must be a JSON value, got ${describe(node)}`);
  const value: unknown = node.value;
  if (value === null || typeof value === 'string' || typeof value === 'boolean') return value;
  if (typeof value === 'bigint') {
    if (value > BigInt(Number.MAX_SAFE_INTEGER) || value < BigInt(Number.MIN_SAFE_INTEGER)) {
      fail(ctx, path, `${value} is not exact as a JSON number (beyond ±2^53−1); quote it`);
    }
    return Number(value);
  }
  if (typeof value === 'number') {
    if (!Number.isFinite(value)) fail(ctx, path, `${describe(node)} is not a JSON number`);
    return value;
  }
  if (value instanceof Date) return node.source ?? value.toISOString();
  fail(ctx, path, `must be a string, number, bool, null, list or map, got ${describe(node)}`);
}
