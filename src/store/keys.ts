import { createHash } from 'node:crypto';
import type { Entry } from '../core/check.js';
import type { Algorithm, RuleNode } from '../rules/types.js';

/**
 * Counter keys: one per (domain, tenant, route, algorithm, window).
 *
 *   PREFIX tg:{DOMAIN TENANT_KEY TENANT_VALUE}TENANT_POSITION|ROUTE_KEY ROUTE_VALUE ...|ALGORITHM:WINDOW_MS
 *
 * A calendar window's WINDOW_MS is its `PERIOD@ZONE` instead (`month@Europe/Paris`), the zone as
 * the rules wrote it, so that a runtime whose tz database renames zones keeps the counters.
 *
 * Every part is length-prefixed (`<utf-8 bytes>:<text>`) and the tenant's position among the
 * entries is kept, so two different descriptors never share a key whatever bytes they hold. The
 * braces are a Redis Cluster hash tag: every counter of one tenant lives on one slot, so a request
 * whose descriptors share a tenant is one script call. Inside the tag `\`, `{` and `}` are
 * escaped, because Redis ends the tag at the first `}`.
 *
 * A tag or a route longer than LONG_PART_BYTES is replaced by `#` and 128 bits of its SHA-256, so
 * a key stays under about 250 bytes however long the request's values are (MAX_ENTRY_BYTES allows
 * 1 KB each): what one request can write to Redis is bounded by its number of counters. A hashed
 * tag is still the tenant's own, so its counters still share a slot. `#` cannot start a part
 * that is not hashed (those start with a length), so a hashed key never equals another key.
 *
 * The namespace `tg:` holds Redis hashes of the fields that `lua/` writes. Instances that share
 * a Redis during a rolling deploy must agree on each counter's name and type: a change to the type
 * of a counter's value takes a new namespace, never `tg:`, and a change to how keys are spelled
 * says which counters it restarts (docs/redis.md, "Key format and upgrades").
 */
export const NAMESPACE = 'tg';

export const LONG_PART_BYTES = 100;

const ALGORITHM_CODES: Readonly<Record<Algorithm, string>> = {
  fixed_window: 'fw',
  sliding_window: 'sw',
  token_bucket: 'tb',
};

function part(text: string): string {
  return `${Buffer.byteLength(text)}:${text}`;
}

function escapeTag(text: string): string {
  if (!text.includes('{') && !text.includes('}') && !text.includes('\\')) return text;
  let escaped = '';
  for (const char of text) {
    escaped += char === '\\' ? '\\\\' : char === '{' ? '\\(' : char === '}' ? '\\)' : char;
  }
  return escaped;
}

/**
 * The tenant of a descriptor: the entry `tenantKey` names when the descriptor has it, otherwise
 * the first entry.
 */
export function tenantIndex(entries: readonly Entry[], tenantKey: string | undefined): number {
  if (tenantKey !== undefined) {
    for (let i = 0; i < entries.length; i++) if (entries[i]?.key === tenantKey) return i;
  }
  return 0;
}

export function counterKey(
  prefix: string,
  domain: string,
  entries: readonly Entry[],
  tenantKey: string | undefined,
  algorithm: Algorithm,
  /** The window in ms, or a calendar window's `period@zone`. */
  windowMs: number | string,
): string {
  const tenant = tenantIndex(entries, tenantKey);
  let tag = part(domain);
  let route = '';
  for (let i = 0; i < entries.length; i++) {
    const entry = entries[i] as Entry;
    const pair = part(entry.key) + part(entry.value);
    if (i === tenant) tag += pair;
    else route += pair;
  }
  return `${prefix}${NAMESPACE}:{${short(escapeTag(tag))}}${tenant}|${short(route)}|${ALGORITHM_CODES[algorithm]}:${windowMs}`;
}

/** The part itself, or `#` and 128 bits of its SHA-256 when it is over LONG_PART_BYTES. */
function short(text: string): string {
  if (text.length <= LONG_PART_BYTES / 3 || Buffer.byteLength(text) <= LONG_PART_BYTES) return text;
  return `#${createHash('sha256').update(text).digest().subarray(0, 16).toString('base64url')}`;
}

/**
 * COMPAT_KEYS=reference: envoyproxy/ratelimit's own key for a descriptor, less its window: the
 * prefix as given, the domain, then each entry's key and value, each followed by `_`; then the
 * window's start, in whole seconds of the instance's clock (`referenceWindowKey`). As
 * in the reference, nothing is escaped, so descriptors whose parts hold `_` may share a key, and
 * nothing is hashed: a key is as long as the request's values (MAX_ENTRY_BYTES bounds them).
 * The window is in the key (`referenceWindowKey`), so that the caches in front of the store,
 * keyed by it, keep a descriptor's windows of different units apart, as the reference's does.
 */
export function referenceKey(prefix: string, domain: string, entries: readonly Entry[]): string {
  let key = `${prefix}${domain}_`;
  for (const entry of entries) key += `${entry.key}_${entry.value}_`;
  return key;
}

/** A reference key (`referenceKey`) with the start of the window holding `nowMs`, in seconds. */
export function referenceWindowKey(key: string, windowMs: number, nowMs: number): string {
  const seconds = Math.floor(nowMs / 1000);
  const window = windowMs / 1000;
  return `${key}${seconds - (seconds % window)}`;
}

/**
 * The entries a counter is keyed by: the request's, except at levels matched by a
 * `share_threshold` wildcard, where every matching value shares the pattern's counter.
 */
export function counterEntries(entries: readonly Entry[], node: RuleNode): readonly Entry[] {
  let shared: Entry[] | undefined;
  let level = entries.length - 1;
  for (let at: RuleNode | undefined = node; at !== undefined; at = at.parent, level--) {
    const entry = entries[level];
    if (!at.shareThreshold || entry === undefined) continue;
    shared ??= entries.slice();
    shared[level] = { key: entry.key, value: at.value ?? '' };
  }
  return shared ?? entries;
}

/**
 * The health probe's counter (see `probeArgs`), one per hash tag it needs: `n` picks a slot, so
 * that on Redis Cluster the probe can reach every master. Its tag starts with a letter, where a
 * counter's starts with a length, so it is never a counter's key.
 */
export function probeKey(prefix: string, n = 0): string {
  return `${prefix}${NAMESPACE}:{probe${n === 0 ? '' : `-${n}`}}`;
}
