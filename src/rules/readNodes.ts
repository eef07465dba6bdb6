/**
 * Typed readers over YAML nodes. Each one rejects what it cannot read with a `RulesError` that
 * names the file, the path in the file and the key.
 */

import { isAlias, isMap, isScalar, isSeq, type Document, type Node } from 'yaml';
import { RulesError } from '../errors.js';

/** Reference keys tollgate does not implement yet: loading stops rather than ignore them. */
const NOT_SUPPORTED = new Set([
  'replaces',
  'shadow_mode',
  'quota_mode',
  'detailed_metric',
  'value_to_metric',
  'share_threshold',
  'metadata',
]);
const UINT32_MAX = 4_294_967_295n;

export type Value = Node | null | undefined;
export type Fields = ReadonlyMap<string, Value>;

/** What every reader needs: the file name for messages and the document for aliases. */
export interface NodeContext {
  file: string;
  doc: Document.Parsed;
}

export const join = (path: string, key: string): string => (path === '' ? key : `${path}.${key}`);

export function fail(ctx: NodeContext, path: string, message: string): never {
  throw new RulesError(`${ctx.file}: ${path === '' ? '' : `${path}: `}${message}`);
}

/** Follows `*anchor` references so aliased nodes validate like inline ones. */
export function resolve(ctx: NodeContext, node: unknown): Value {
  return isAlias(node) ? (node.resolve(ctx.doc) ?? null) : (node as Value);
}

export function describe(node: Value): string {
  if (isMap(node)) return 'a map';
  if (isSeq(node)) return 'a list';
  return isScalar(node) ? `'${node.source ?? String(node.value)}'` : 'nothing';
}

/** The map's entries by key, after rejecting every key outside `allowed`. */
export function fields(
  ctx: NodeContext,
  node: Value,
  path: string,
  allowed: readonly string[],
): Fields {
  if (!isMap(node)) fail(ctx, path, `must be a map, got ${describe(node)}`);
  const out = new Map<string, Value>();
  for (const pair of node.items) {
    // The source text, so a YAML merge key reads as '<<' rather than its internal symbol.
    const key = isScalar(pair.key) ? (pair.key.source ?? String(pair.key.value)) : String(pair.key);
    if (NOT_SUPPORTED.has(key)) fail(ctx, join(path, key), `not supported yet: ${key}`);
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
