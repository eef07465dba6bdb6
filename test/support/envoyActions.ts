/**
 * A model of Envoy in front of tollgate, read from an Envoy v3 bootstrap (envoy/envoy.yaml): the
 * descriptors the HTTP rate-limit filter sends for a request (the route Envoy picks, then each
 * `rate_limits` entry's actions), the network filter's call per new connection, and what the
 * client sees for each answer. It follows Envoy's source (router/router_ratelimit.cc,
 * filters/http/ratelimit/ratelimit.cc, http/header_utility.cc, http/conn_manager_utility.cc) for
 * what it supports, and throws an `EnvoyModelError` naming the field for anything else, so that
 * an edit to the config can never be silently ignored by the tests built on it.
 */

import { readFileSync } from 'node:fs';
import { isIP } from 'node:net';
import { parse } from 'yaml';
import type { RateLimitRequestObject, RateLimitResponseObject } from '@tollgate/client';

export class EnvoyModelError extends Error {
  override name = 'EnvoyModelError';
}

export interface Entry {
  key: string;
  value: string;
}

/** One HTTP request as it reaches Envoy. */
export interface HttpRequest {
  /** `:path`, with any query string. */
  path: string;
  method?: string;
  /** `:authority` (or a `host` header); matched against the virtual hosts' `domains`. */
  authority?: string;
  /** Request headers, names in any case. */
  headers?: Readonly<Record<string, string>>;
  /** The downstream peer's IP address; omit for a peer without one (a Unix socket). */
  clientAddress?: string;
}

/** An entry of a descriptor shape: `value` when the config fixes it, absent when the request supplies it. */
export interface ShapeEntry {
  key: string;
  value?: string;
}

/** A descriptor the config can send, and the `rate_limits` entry (or TCP filter) it comes from. */
export interface DescriptorShape {
  domain: string;
  source: string;
  entries: ShapeEntry[];
}

export interface TracedDescriptor {
  source: string;
  entries: Entry[];
}

/** What Envoy does with a request before it calls tollgate. */
export interface HttpTrace {
  /** The route Envoy picked; undefined: none matched (404), and no call. */
  route: string | undefined;
  /** The descriptors the filter sends, in order; none: no call. */
  descriptors: TracedDescriptor[];
}

/** What the client receives. */
export interface HttpAnswer {
  status: number;
  /** The headers Envoy adds, names lowercased as its header map holds them. */
  headers: Record<string, string>;
  /** Whether the request went on to the upstream cluster (which answers 200 here). */
  forwarded: boolean;
}

export type CheckFn = (request: RateLimitRequestObject) => Promise<RateLimitResponseObject>;

export interface HttpRateLimit {
  /** `listener NAME chain[i]`. */
  source: string;
  domain: string;
  failureModeDeny: boolean;
  trace(request: HttpRequest): HttpTrace;
  /** The descriptors' entries, as tollgate receives them. */
  descriptorsFor(request: HttpRequest): Entry[][];
  /** The ShouldRateLimit request, or undefined when Envoy makes no call. */
  requestFor(request: HttpRequest): RateLimitRequestObject | undefined;
  /** The client's answer for tollgate's response, or for a call that failed (an Error). */
  answer(outcome: RateLimitResponseObject | Error): HttpAnswer;
  /** The whole exchange: route, call (when there is one), answer. */
  send(request: HttpRequest, check: CheckFn): Promise<HttpAnswer>;
  shapes(): DescriptorShape[];
  /** The request headers whose value becomes an entry with this key (request_headers actions). */
  headersFor(key: string): string[];
  /** Requests built from the config's own literals, enough to make every shape appear. */
  probeRequests(): HttpRequest[];
}

export interface TcpRateLimit {
  source: string;
  domain: string;
  failureModeDeny: boolean;
  descriptors: Entry[][];
  requestFor(): RateLimitRequestObject;
  /** `closed`: Envoy closes the new connection. */
  answer(outcome: RateLimitResponseObject | Error): 'open' | 'closed';
  shapes(): DescriptorShape[];
}

export interface EnvoyModel {
  http: HttpRateLimit[];
  tcp: TcpRateLimit[];
  /** Every descriptor shape the config can send, HTTP then TCP. */
  shapes(): DescriptorShape[];
}

/** `[tenant=<request>, route=orders]`. */
export function formatShape(entries: readonly ShapeEntry[]): string {
  return `[${entries.map((e) => `${e.key}=${e.value ?? '<request>'}`).join(', ')}]`;
}

export function loadEnvoyModel(path: string): EnvoyModel {
  return parseEnvoyModel(readFileSync(path, 'utf8'));
}

// --- Reading the proto-shaped YAML. Envoy takes a field in snake_case or as its lowerCamelCase
// JSON name; these readers accept both and name the field's path when they refuse a value.

type Node = Record<string, unknown>;

const isNode = (value: unknown): value is Node =>
  typeof value === 'object' && value !== null && !Array.isArray(value);
const snake = (key: string): string => key.replace(/[A-Z]/g, (c) => `_${c.toLowerCase()}`);
const camel = (key: string): string =>
  key.replace(/_([a-z0-9])/g, (_, c: string) => c.toUpperCase());

function fail(where: string, message: string): never {
  throw new EnvoyModelError(`${where}: ${message}`);
}

function unsupported(where: string, what: string): never {
  fail(where, `${what} is not modelled by test/support/envoyActions.ts; extend the model`);
}

const field = (n: Node, name: string): unknown => (name in n ? n[name] : n[camel(name)]);
const has = (n: Node, name: string): boolean => field(n, name) !== undefined;

function asNode(value: unknown, where: string): Node {
  if (value === null) return {};
  if (!isNode(value)) fail(where, 'expected a map');
  return value;
}

function child(parent: Node, name: string, where: string): Node | undefined {
  const value = field(parent, name);
  return value === undefined ? undefined : asNode(value, `${where}.${name}`);
}

function list(parent: Node, name: string, where: string): unknown[] {
  const value = field(parent, name);
  if (value === undefined) return [];
  if (!Array.isArray(value)) fail(`${where}.${name}`, 'expected a list');
  return value;
}

function str(parent: Node, name: string, where: string): string | undefined {
  const value = field(parent, name);
  if (value !== undefined && typeof value !== 'string') {
    fail(`${where}.${name}`, `expected a string, got ${String(value)}`);
  }
  return value;
}

function required(parent: Node, name: string, where: string): string {
  const value = str(parent, name, where);
  if (value === undefined || value === '') fail(`${where}.${name}`, 'required');
  return value;
}

/** A bool, or a BoolValue/UInt32Value wrapper written as `{value: ...}`. */
function scalar<T>(
  parent: Node,
  name: string,
  where: string,
  fallback: T,
  ok: (v: unknown) => boolean,
): T {
  let value = field(parent, name);
  if (isNode(value)) value = value.value;
  if (value === undefined) return fallback;
  if (!ok(value)) fail(`${where}.${name}`, `unexpected value ${String(value)}`);
  return value as T;
}
const bool = (p: Node, name: string, where: string, fallback: boolean): boolean =>
  scalar(p, name, where, fallback, (v) => typeof v === 'boolean');
const uint = (p: Node, name: string, where: string, fallback: number): number =>
  scalar(p, name, where, fallback, (v) => Number.isInteger(v) && (v as number) >= 0);

/** Refuses any field not in `known`: a field the model does not read might change what Envoy does. */
function onlyFields(value: Node, known: readonly string[], where: string): void {
  for (const key of Object.keys(value)) {
    if (key !== '@type' && !known.includes(snake(key)))
      unsupported(`${where}.${key}`, 'this field');
  }
}

/** Exactly one of `kinds` must be set; returns it. */
function oneOf(n: Node, kinds: readonly string[], where: string): string {
  const set = kinds.filter((k) => has(n, k));
  if (set.length !== 1) fail(where, `expected exactly one of ${kinds.join(', ')}`);
  return set[0]!;
}

// --- Matchers, as Envoy evaluates them.

/** A header (`:path` included) and a value that satisfies a matcher, for probe requests. */
interface Literal {
  header: string;
  value: string;
}

/** RE2's full match, approximated by a JavaScript RegExp anchored at both ends. */
function fullRegex(value: unknown, where: string): RegExp {
  return new RegExp(`^(?:${required(asNode(value, where), 'regex', where)})$`, 'u');
}

/** envoy.type.matcher.v3.StringMatcher; `literal` is a value it accepts, when one is known. */
function stringMatcher(
  value: unknown,
  where: string,
): { test(v: string): boolean; literal?: string } {
  const m = asNode(value, where);
  onlyFields(m, ['exact', 'prefix', 'suffix', 'contains', 'safe_regex', 'ignore_case'], where);
  const kind = oneOf(m, ['exact', 'prefix', 'suffix', 'contains', 'safe_regex'], where);
  if (kind === 'safe_regex') {
    const regex = fullRegex(field(m, kind), `${where}.${kind}`);
    return { test: (v) => regex.test(v) };
  }
  const fold = (s: string) => (bool(m, 'ignore_case', where, false) ? s.toLowerCase() : s);
  const literal = str(m, kind, where) ?? '';
  const want = fold(literal);
  const tests: Record<string, (v: string) => boolean> = {
    exact: (v) => fold(v) === want,
    prefix: (v) => fold(v).startsWith(want),
    suffix: (v) => fold(v).endsWith(want),
    contains: (v) => fold(v).includes(want),
  };
  return { test: tests[kind]!, literal };
}

interface HeaderMatcher {
  test(headers: ReadonlyMap<string, string>): boolean;
  literals: Literal[];
}

const HEADER_MATCHERS = [
  'exact_match',
  'safe_regex_match',
  'range_match',
  'present_match',
  'prefix_match',
  'suffix_match',
  'contains_match',
  'string_match',
];

/** One route.v3.HeaderMatcher, as HeaderUtility::matchHeaders evaluates it. */
function headerMatcher(value: unknown, where: string): HeaderMatcher {
  const m = asNode(value, where);
  onlyFields(
    m,
    ['name', ...HEADER_MATCHERS, 'invert_match', 'treat_missing_header_as_empty'],
    where,
  );
  const name = required(m, 'name', where).toLowerCase();
  const invert = bool(m, 'invert_match', where, false);
  const missingAsEmpty = bool(m, 'treat_missing_header_as_empty', where, false);
  const kinds = HEADER_MATCHERS.filter((k) => has(m, k));
  if (kinds.length > 1) fail(where, `more than one of ${kinds.join(', ')}`);
  const kind = kinds[0] ?? 'present_match';
  // A matcher with no specifier checks presence.
  const present = kind === 'present_match' ? bool(m, kind, where, kinds.length === 0) : undefined;
  let specific: { test(v: string): boolean; literal?: string };
  if (kind === 'present_match') {
    specific = { test: () => present!, literal: present ? 'probe' : undefined };
  } else if (kind === 'exact_match') {
    const want = str(m, kind, where) ?? '';
    specific = { test: (v) => want === '' || v === want, literal: want };
  } else if (kind === 'safe_regex_match') {
    const regex = fullRegex(field(m, kind), `${where}.${kind}`);
    specific = { test: (v) => regex.test(v) };
  } else if (kind === 'range_match') {
    const range = asNode(field(m, kind), `${where}.${kind}`);
    const [start, end] = [Number(field(range, 'start') ?? 0), Number(field(range, 'end') ?? 0)];
    const test = (v: string) => /^[+-]?\d+$/.test(v) && Number(v) >= start && Number(v) < end;
    specific = { test, literal: String(start) };
  } else if (kind === 'string_match') {
    specific = stringMatcher(field(m, kind), `${where}.${kind}`);
  } else {
    // prefix_match, suffix_match, contains_match: the deprecated forms of string_match.
    const as = { [kind.replace('_match', '')]: str(m, kind, where) ?? '' };
    specific = stringMatcher(as, `${where}.${kind}`);
  }
  return {
    test(headers) {
      const actual = headers.get(name);
      if (actual === undefined && !missingAsEmpty) {
        return present !== undefined && (invert ? present : !present);
      }
      return specific.test(actual ?? '') !== invert;
    },
    literals: specific.literal === undefined ? [] : [{ header: name, value: specific.literal }],
  };
}

// --- The client's address, as the actions read it.

interface ConnectionManager {
  useRemoteAddress: boolean;
  xffNumTrustedHops: number;
  normalizePath: boolean;
  mergeSlashes: boolean;
}

const UNRESERVED = /^[A-Za-z0-9\-._~]$/;

/**
 * The path every filter and the router see: with `normalize_path`, RFC 3986 normalization
 * (percent-encoded unreserved characters decoded, other escapes upper-cased, dot segments
 * removed); then, with `merge_slashes`, runs of '/' made one. The query is left as it is.
 */
export function normalizedPath(
  path: string,
  cm: Pick<ConnectionManager, 'normalizePath' | 'mergeSlashes'>,
): string {
  const cut = path.search(/[?#]/);
  let head = cut < 0 ? path : path.slice(0, cut);
  const tail = cut < 0 ? '' : path.slice(cut);
  if (cm.normalizePath) {
    head = head.replace(/%([0-9A-Fa-f]{2})/g, (escape, hex: string) => {
      const char = String.fromCharCode(parseInt(hex, 16));
      return UNRESERVED.test(char) ? char : escape.toUpperCase();
    });
    head = removeDotSegments(head);
  }
  if (cm.mergeSlashes) head = head.replace(/\/{2,}/g, '/');
  return head + tail;
}

/** RFC 3986 section 5.2.4. */
function removeDotSegments(path: string): string {
  const out: string[] = [];
  for (const segment of path.split('/')) {
    if (segment === '..') {
      if (out.length > 1) out.pop();
    } else if (segment !== '.') {
      out.push(segment);
    }
  }
  const last = path.split('/').pop();
  if (last === '.' || last === '..') out.push('');
  return out.join('/') || '/';
}

/** `addressAsString()`: IPv6 compressed and lowercased. */
function canonicalIp(ip: string): string {
  return isIP(ip) === 6 && !ip.includes('.')
    ? new URL(`http://[${ip}]/`).hostname.slice(1, -1)
    : ip;
}

/** Utility::getLastAddressFromXFF: the entry `skip` places from the right, if it is an IP. */
function addressFromXff(xff: string | undefined, skip: number): string | undefined {
  if (xff === undefined) return undefined;
  let rest = xff;
  for (let i = 0; i < skip; i++) {
    const comma = rest.lastIndexOf(',');
    if (comma < 0) return undefined;
    rest = rest.slice(0, comma);
  }
  const comma = rest.lastIndexOf(',');
  if (comma >= 0 && comma + 1 < rest.length) rest = rest.slice(comma + 1);
  const candidate = rest.trim();
  return isIP(candidate) === 0 ? undefined : canonicalIp(candidate);
}

/**
 * The downstream address Envoy trusts (ConnectionManagerUtility::mutateRequestHeaders). With
 * `use_remote_address: false`, the default, it is the X-Forwarded-For entry
 * `xff_num_trusted_hops` from the right when that is an IP, else the peer: whatever the client
 * writes there. With `true`, the peer, unless trusted hops say to read XFF.
 */
function trustedAddress(peer: string | undefined, xff: string | undefined, cm: ConnectionManager) {
  const fromXff = cm.useRemoteAddress
    ? cm.xffNumTrustedHops > 0
      ? addressFromXff(xff, cm.xffNumTrustedHops - 1)
      : undefined
    : addressFromXff(xff, cm.xffNumTrustedHops);
  return fromXff ?? (peer === undefined ? undefined : canonicalIp(peer));
}

// --- Rate-limit actions. Each produces its entry, skips itself (skip_if_absent), or cannot
// produce it, which drops the whole descriptor (RateLimitPolicyEntryImpl::populateDescriptors).

interface RequestContext {
  /** Names lowercased, with `:path`, `:method`, `:authority` and `:scheme`. */
  headers: ReadonlyMap<string, string>;
  remoteAddress: string | undefined;
}

interface Action {
  produce(ctx: RequestContext): Entry | 'skip' | 'drop';
  shape: ShapeEntry;
  /** skip_if_absent: the entry may be missing from the descriptor. */
  optional: boolean;
  literals: Literal[];
  /** The request header it copies, for request_headers. */
  header?: string;
}

/** The action types the model builds entries for. */
export const SUPPORTED_ACTIONS = [
  'request_headers',
  'generic_key',
  'header_value_match',
  'remote_address',
  'destination_cluster',
  'source_cluster',
] as const;

/** Envoy's other actions: known, but refused until the model learns them. */
const UNMODELLED_ACTIONS = [
  'masked_remote_address',
  'query_parameters',
  'query_parameter_value_match',
  'metadata',
  'dynamic_metadata',
  'extension',
];

function compileAction(value: unknown, where: string, scope: ActionScope): Action {
  const action = asNode(value, where);
  const types = Object.keys(action).map(snake);
  if (types.length !== 1) fail(where, `expected one action, got ${types.join(', ') || 'none'}`);
  const type = types[0]!;
  const at = `${where}.${type}`;
  const config = asNode(field(action, type), at);
  const fixed = (key: string, value: string): Action => ({
    produce: () => ({ key, value }),
    shape: { key, value },
    optional: false,
    literals: [],
  });
  switch (type) {
    case 'generic_key':
      onlyFields(config, ['descriptor_key', 'descriptor_value'], at);
      return fixed(
        str(config, 'descriptor_key', at) || 'generic_key',
        required(config, 'descriptor_value', at),
      );
    case 'request_headers': {
      onlyFields(config, ['header_name', 'descriptor_key', 'skip_if_absent'], at);
      const header = required(config, 'header_name', at).toLowerCase();
      const key = required(config, 'descriptor_key', at);
      const skip = bool(config, 'skip_if_absent', at, false);
      return {
        produce(ctx) {
          const value = ctx.headers.get(header);
          return value !== undefined ? { key, value } : skip ? 'skip' : 'drop';
        },
        shape: { key },
        optional: skip,
        literals: [{ header, value: 'probe' }],
        header,
      };
    }
    case 'header_value_match': {
      onlyFields(config, ['descriptor_key', 'descriptor_value', 'expect_match', 'headers'], at);
      const key = str(config, 'descriptor_key', at) || 'header_match';
      const value = required(config, 'descriptor_value', at);
      const expect = bool(config, 'expect_match', at, true);
      const matchers = list(config, 'headers', at).map((h, i) =>
        headerMatcher(h, `${at}.headers[${i}]`),
      );
      if (matchers.length === 0) fail(`${at}.headers`, 'needs at least one header matcher');
      return {
        produce: (ctx) =>
          matchers.every((m) => m.test(ctx.headers)) === expect ? { key, value } : 'drop',
        shape: { key, value },
        optional: false,
        literals: matchers.flatMap((m) => m.literals),
      };
    }
    case 'remote_address':
      onlyFields(config, [], at);
      return {
        produce: ({ remoteAddress: value }) =>
          value === undefined ? 'drop' : { key: 'remote_address', value },
        shape: { key: 'remote_address' },
        optional: false,
        literals: [],
      };
    case 'destination_cluster':
      onlyFields(config, [], at);
      if (scope.cluster === undefined) unsupported(at, 'a route without a static `cluster`');
      return fixed('destination_cluster', scope.cluster);
    case 'source_cluster':
      onlyFields(config, [], at);
      if (scope.localCluster === undefined) fail(at, 'needs node.cluster in the bootstrap');
      return fixed('source_cluster', scope.localCluster);
    default:
      if (UNMODELLED_ACTIONS.includes(type)) unsupported(at, `the ${type} action`);
      fail(at, `unknown rate-limit action '${type}' (known: ${SUPPORTED_ACTIONS.join(', ')})`);
  }
}

interface ActionScope {
  cluster: string | undefined;
  localCluster: string | undefined;
  stage: number;
}

interface RateLimitEntry {
  source: string;
  actions: Action[];
}

/** A route's or virtual host's `rate_limits`: the entries of the filter's stage. */
function compileRateLimits(
  parent: Node,
  where: string,
  label: string,
  scope: ActionScope,
): RateLimitEntry[] {
  const entries: RateLimitEntry[] = [];
  list(parent, 'rate_limits', where).forEach((value, i) => {
    const at = `${where}.rate_limits[${i}]`;
    const entry = asNode(value, at);
    // disable_key names a runtime flag, on unless the runtime turns it off.
    onlyFields(entry, ['actions', 'stage', 'disable_key'], at);
    const actions = list(entry, 'actions', at).map((a, j) =>
      compileAction(a, `${at}.actions[${j}]`, scope),
    );
    if (actions.length === 0) fail(`${at}.actions`, 'needs at least one action');
    if (uint(entry, 'stage', at, 0) === scope.stage) {
      entries.push({ source: `${label}[${i}]`, actions });
    }
  });
  return entries;
}

function buildDescriptor(entry: RateLimitEntry, ctx: RequestContext): Entry[] | undefined {
  const entries: Entry[] = [];
  for (const action of entry.actions) {
    const produced = action.produce(ctx);
    if (produced === 'drop') return undefined;
    if (produced !== 'skip') entries.push(produced);
  }
  return entries;
}

function shapesOf(entry: RateLimitEntry, domain: string): DescriptorShape[] {
  // Each skip_if_absent entry may be there or not. With all of them skipped Envoy still sends
  // the descriptor, with no entries.
  let variants: ShapeEntry[][] = [[]];
  for (const action of entry.actions) {
    const withIt = variants.map((v) => [...v, action.shape]);
    variants = action.optional ? [...withIt, ...variants] : withIt;
  }
  return variants.map((entries) => ({ domain, source: entry.source, entries }));
}

// --- Routes: the first whose match fits, in order (VirtualHostImpl::getRouteFromEntries).

interface Route {
  label: string;
  /** Path matching ignores the query and fragment (Matchers::PathMatcher). */
  matches(pathOnly: string, headers: ReadonlyMap<string, string>): boolean;
  /** The route's entries, else the virtual host's (vh_rate_limits OVERRIDE), or both (include_vh_rate_limits). */
  policy: RateLimitEntry[];
  pathLiterals: string[];
  literals: Literal[];
}

function compileRoute(
  value: unknown,
  where: string,
  label: string,
  vhost: { node: Node; where: string },
  scope: Omit<ActionScope, 'cluster'>,
): Route {
  const route = asNode(value, where);
  // request_headers_to_add is applied by the router, after the rate-limit filter.
  onlyFields(route, ['name', 'match', 'route', 'request_headers_to_add'], where);
  const mAt = `${where}.match`;
  const match = asNode(field(route, 'match'), mAt);
  const kinds = ['prefix', 'path', 'safe_regex', 'path_separated_prefix'];
  onlyFields(match, [...kinds, 'case_sensitive', 'headers'], mAt);
  const kind = oneOf(match, kinds, mAt);
  const fold = (s: string) => (bool(match, 'case_sensitive', mAt, true) ? s : s.toLowerCase());
  let pathMatches: (path: string) => boolean;
  let pathLiterals: string[] = [];
  let matchLabel: string;
  if (kind === 'safe_regex') {
    const regex = fullRegex(field(match, kind), `${mAt}.${kind}`);
    pathMatches = (p) => regex.test(p);
    matchLabel = `safe_regex ${regex.source}`;
  } else {
    const literal = str(match, kind, mAt) ?? '';
    const want = fold(literal);
    pathMatches = {
      prefix: (p: string) => fold(p).startsWith(want),
      path: (p: string) => fold(p) === want,
      path_separated_prefix: (p: string) => fold(p) === want || fold(p).startsWith(`${want}/`),
    }[kind]!;
    pathLiterals = kind === 'path' ? [literal] : [literal, `${literal.replace(/\/$/, '')}/probe`];
    matchLabel = `${kind} ${literal}`;
  }
  const headers = list(match, 'headers', mAt).map((h, i) =>
    headerMatcher(h, `${mAt}.headers[${i}]`),
  );
  // direct_response and redirect routes have no route entry, so the filter makes no call.
  const aAt = `${where}.route`;
  const action = child(route, 'route', where) ?? unsupported(where, 'a route without `route`');
  const full = `${label} (${matchLabel})`;
  const actionScope = { ...scope, cluster: str(action, 'cluster', aAt) };
  const own = compileRateLimits(action, aAt, `${full} rate_limits`, actionScope);
  const vh = compileRateLimits(
    vhost.node,
    vhost.where,
    `${full} virtual host rate_limits`,
    actionScope,
  );
  const include = bool(action, 'include_vh_rate_limits', aAt, false);
  return {
    label: full,
    matches: (path, h) => pathMatches(path) && headers.every((m) => m.test(h)),
    policy: include ? [...own, ...vh] : own.length > 0 ? own : vh,
    pathLiterals,
    literals: headers.flatMap((m) => m.literals),
  };
}

// --- The filters.

const HCM_TYPE =
  'type.googleapis.com/envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager';
const HTTP_RATELIMIT_TYPE =
  'type.googleapis.com/envoy.extensions.filters.http.ratelimit.v3.RateLimit';
const NETWORK_RATELIMIT_TYPE =
  'type.googleapis.com/envoy.extensions.filters.network.ratelimit.v3.RateLimit';

const typeOf = (filter: Node): unknown =>
  isNode(field(filter, 'typed_config')) ? (field(filter, 'typed_config') as Node)['@type'] : '';

/** An HttpStatus `{code: N}`. */
function statusCode(parent: Node, name: string, where: string, fallback: number): number {
  const status = child(parent, name, where);
  if (status === undefined) return fallback;
  const code = field(status, 'code');
  if (typeof code !== 'number') unsupported(`${where}.${name}.code`, 'a status given by name');
  return code;
}

/** tollgate's response_headers_to_add, names lowercased as Envoy's header map holds them. */
function headersToAdd(response: RateLimitResponseObject): Record<string, string> {
  const out: Record<string, string> = {};
  for (const { key = '', value = '' } of response.response_headers_to_add ?? []) {
    const name = key.toLowerCase();
    out[name] = out[name] === undefined ? value : `${out[name]},${value}`;
  }
  return out;
}

/** HttpConnectionManager fields that cannot change which descriptors are sent. */
const HCM_FIELDS = [
  'stat_prefix',
  'codec_type',
  'http_filters',
  'route_config',
  'use_remote_address',
  'xff_num_trusted_hops',
  'normalize_path',
  'merge_slashes',
  'skip_xff_append',
  'access_log',
  'generate_request_id',
  'server_name',
  'common_http_protocol_options',
  'http_protocol_options',
  'http2_protocol_options',
  'stream_idle_timeout',
  'request_timeout',
  'drain_timeout',
  'tracing',
  'via',
];

const HTTP_FILTER_FIELDS = [
  'domain',
  'stage',
  'timeout',
  'failure_mode_deny',
  'rate_limit_service',
  'enable_x_ratelimit_headers',
  'disable_x_envoy_ratelimited_header',
  'rate_limited_status',
  'status_on_error',
  'rate_limited_as_resource_exhausted',
];

function compileHttp(
  hcm: Node,
  where: string,
  source: string,
  localCluster: string | undefined,
): HttpRateLimit | undefined {
  const filters = list(hcm, 'http_filters', where).map((f, i) =>
    asNode(f, `${where}.http_filters[${i}]`),
  );
  const index = filters.findIndex((f) => typeOf(f) === HTTP_RATELIMIT_TYPE);
  if (index < 0) return undefined;
  filters.forEach((f, i) => {
    const at = `${where}.http_filters[${i}]`;
    // A filter before it could change the headers it reads, or answer first.
    if (i < index) unsupported(at, 'an HTTP filter before the rate-limit filter');
    if (i > index && typeOf(f) === HTTP_RATELIMIT_TYPE)
      unsupported(at, 'a second rate-limit filter');
  });
  onlyFields(hcm, HCM_FIELDS, where);
  const cm: ConnectionManager = {
    useRemoteAddress: bool(hcm, 'use_remote_address', where, false),
    xffNumTrustedHops: uint(hcm, 'xff_num_trusted_hops', where, 0),
    normalizePath: bool(hcm, 'normalize_path', where, false),
    mergeSlashes: bool(hcm, 'merge_slashes', where, false),
  };

  const cAt = `${where}.http_filters[${index}].typed_config`;
  const config = asNode(field(filters[index]!, 'typed_config'), cAt);
  onlyFields(config, HTTP_FILTER_FIELDS, cAt);
  const domain = required(config, 'domain', cAt);
  const xHeaders = str(config, 'enable_x_ratelimit_headers', cAt) ?? 'OFF';
  if (xHeaders !== 'OFF') unsupported(`${cAt}.enable_x_ratelimit_headers`, `'${xHeaders}'`);
  const failureModeDeny = bool(config, 'failure_mode_deny', cAt, false);
  const xEnvoyRateLimited = !bool(config, 'disable_x_envoy_ratelimited_header', cAt, false);
  // Envoy answers 429 when rate_limited_status is under 400.
  const limitedStatus = statusCode(config, 'rate_limited_status', cAt, 429);
  const rateLimitedStatus = limitedStatus < 400 ? 429 : limitedStatus;
  const statusOnError = statusCode(config, 'status_on_error', cAt, 500);
  const scope = { stage: uint(config, 'stage', cAt, 0), localCluster };

  const rcAt = `${where}.route_config`;
  const routeConfig = child(hcm, 'route_config', where) ?? unsupported(where, 'routes from RDS');
  onlyFields(routeConfig, ['name', 'virtual_hosts'], rcAt);
  const hosts = list(routeConfig, 'virtual_hosts', rcAt).map((v, i) => {
    const vAt = `${rcAt}.virtual_hosts[${i}]`;
    const vhost = asNode(v, vAt);
    onlyFields(vhost, ['name', 'domains', 'routes', 'rate_limits'], vAt);
    const name = str(vhost, 'name', vAt) ?? `virtual_hosts[${i}]`;
    const domains = list(vhost, 'domains', vAt).map((d) => String(d).toLowerCase());
    for (const d of domains) if (d !== '*' && d.includes('*')) unsupported(vAt, `domain '${d}'`);
    const routes = list(vhost, 'routes', vAt).map((r, j) =>
      compileRoute(
        r,
        `${vAt}.routes[${j}]`,
        `${source} ${name} routes[${j}]`,
        { node: vhost, where: vAt },
        scope,
      ),
    );
    return { domains, routes };
  });

  function resolve(request: HttpRequest) {
    const peer = request.clientAddress;
    if (peer !== undefined && isIP(peer) === 0) {
      throw new EnvoyModelError(`clientAddress '${peer}' is not an IP address`);
    }
    const headers = new Map<string, string>();
    for (const [name, value] of Object.entries(request.headers ?? {})) {
      headers.set(name.toLowerCase(), value);
    }
    const authority = request.authority ?? headers.get('host') ?? '';
    headers.delete('host');
    const path = normalizedPath(request.path, cm);
    headers.set(':path', path);
    headers.set(':method', request.method ?? 'GET');
    headers.set(':authority', authority);
    headers.set(':scheme', 'http');
    const host =
      hosts.find((h) => h.domains.includes(authority.toLowerCase())) ??
      hosts.find((h) => h.domains.includes('*'));
    const pathOnly = path.replace(/[?#].*$/s, '');
    const route = host?.routes.find((r) => r.matches(pathOnly, headers));
    const remoteAddress = trustedAddress(peer, headers.get('x-forwarded-for'), cm);
    return { route, ctx: { headers, remoteAddress } };
  }

  function trace(request: HttpRequest): HttpTrace {
    const { route, ctx } = resolve(request);
    const descriptors: TracedDescriptor[] = [];
    for (const entry of route?.policy ?? []) {
      const entries = buildDescriptor(entry, ctx);
      if (entries !== undefined) descriptors.push({ source: entry.source, entries });
    }
    return { route: route?.label, descriptors };
  }

  function requestFor(request: HttpRequest): RateLimitRequestObject | undefined {
    const { descriptors } = trace(request);
    if (descriptors.length === 0) return undefined;
    return { domain, descriptors: descriptors.map(({ entries }) => ({ entries })) };
  }

  function answer(outcome: RateLimitResponseObject | Error): HttpAnswer {
    if (outcome instanceof Error) {
      return failureModeDeny
        ? { status: statusOnError, headers: {}, forwarded: false }
        : { status: 200, headers: {}, forwarded: true };
    }
    const headers = headersToAdd(outcome);
    // Envoy's client reads every code but OVER_LIMIT as OK; on OK the headers join the upstream's.
    if (outcome.overall_code !== 'OVER_LIMIT') return { status: 200, headers, forwarded: true };
    if (xEnvoyRateLimited) headers['x-envoy-ratelimited'] = 'true';
    return { status: rateLimitedStatus, headers, forwarded: false };
  }

  return {
    source,
    domain,
    failureModeDeny,
    trace,
    descriptorsFor: (request) => trace(request).descriptors.map((d) => d.entries),
    requestFor,
    answer,
    async send(request, check) {
      if (resolve(request).route === undefined)
        return { status: 404, headers: {}, forwarded: false };
      const call = requestFor(request);
      if (call === undefined) return { status: 200, headers: {}, forwarded: true };
      const toError = (err: unknown) => (err instanceof Error ? err : new Error(String(err)));
      return answer(await check(call).catch(toError));
    },
    shapes: () =>
      hosts.flatMap((h) => h.routes.flatMap((r) => r.policy.flatMap((e) => shapesOf(e, domain)))),
    headersFor(key) {
      const actions = hosts.flatMap((h) =>
        h.routes.flatMap((r) => r.policy.flatMap((e) => e.actions)),
      );
      const names = actions.filter((a) => a.shape.key === key).map((a) => a.header);
      return [...new Set(names.filter((n) => n !== undefined))];
    },
    probeRequests: () => hosts.flatMap((h) => probeRequests(h.domains, h.routes)),
  };
}

/**
 * Requests built from one virtual host's literals: each route's path, the `:path` values its
 * matchers name (alone and under each route's path), and for every header the actions or
 * matchers read: absent, `probe`, or each value a matcher names.
 */
function probeRequests(domains: readonly string[], routes: readonly Route[]): HttpRequest[] {
  const literals = routes.flatMap((r) => [
    ...r.literals,
    ...r.policy.flatMap((e) => e.actions.flatMap((a) => a.literals)),
  ]);
  const pathLiterals = literals.filter((l) => l.header === ':path').map((l) => l.value);
  const paths = new Set(['/', ...pathLiterals]);
  for (const p of routes.flatMap((r) => r.pathLiterals)) {
    paths.add(p);
    for (const l of pathLiterals) paths.add(`${p.replace(/\/$/, '')}${l}`);
  }
  const candidates = new Map<string, Set<string>>();
  for (const { header, value } of literals) {
    if (header.startsWith(':')) continue;
    candidates.set(header, (candidates.get(header) ?? new Set(['probe'])).add(value));
  }
  let headerSets: Record<string, string>[] = [{}];
  for (const [name, values] of candidates) {
    headerSets = headerSets.flatMap((h) => [h, ...[...values].map((v) => ({ ...h, [name]: v }))]);
    if (headerSets.length > 4096) throw new EnvoyModelError('too many probe header combinations');
  }
  const authority = domains.find((d) => d !== '*') ?? 'probe.example';
  return [...paths].flatMap((path) =>
    headerSets.map((headers) => ({ path, authority, headers, clientAddress: '192.0.2.10' })),
  );
}

function compileTcp(config: Node, where: string, source: string): TcpRateLimit {
  onlyFields(
    config,
    ['stat_prefix', 'domain', 'descriptors', 'timeout', 'failure_mode_deny', 'rate_limit_service'],
    where,
  );
  const domain = required(config, 'domain', where);
  const failureModeDeny = bool(config, 'failure_mode_deny', where, false);
  const descriptors = list(config, 'descriptors', where).map((d, i) => {
    const dAt = `${where}.descriptors[${i}]`;
    const descriptor = asNode(d, dAt);
    onlyFields(descriptor, ['entries'], dAt);
    return list(descriptor, 'entries', dAt).map((e, j) => {
      const eAt = `${dAt}.entries[${j}]`;
      const entry = asNode(e, eAt);
      onlyFields(entry, ['key', 'value'], eAt);
      const value = str(entry, 'value', eAt) ?? '';
      // Newer Envoys expand `%...%` in these values per connection.
      if (value.includes('%')) unsupported(`${eAt}.value`, 'a substitution format');
      return { key: required(entry, 'key', eAt), value };
    });
  });
  if (descriptors.length === 0) fail(`${where}.descriptors`, 'needs at least one descriptor');
  return {
    source,
    domain,
    failureModeDeny,
    descriptors,
    requestFor: () => ({ domain, descriptors: descriptors.map((entries) => ({ entries })) }),
    answer(outcome) {
      if (outcome instanceof Error) return failureModeDeny ? 'closed' : 'open';
      return outcome.overall_code === 'OVER_LIMIT' ? 'closed' : 'open';
    },
    shapes: () =>
      descriptors.map((entries, i) => ({ domain, source: `${source} descriptors[${i}]`, entries })),
  };
}

/** The bootstrap's static listeners, read into the model. */
export function parseEnvoyModel(text: string): EnvoyModel {
  const root = asNode(parse(text) as unknown, 'bootstrap');
  if (has(root, 'dynamic_resources')) unsupported('dynamic_resources', 'configuration by xDS');
  const localCluster = str(child(root, 'node', '') ?? {}, 'cluster', 'node');
  const resources = child(root, 'static_resources', '') ?? {};
  const http: HttpRateLimit[] = [];
  const tcp: TcpRateLimit[] = [];
  list(resources, 'listeners', 'static_resources').forEach((l, i) => {
    const lAt = `static_resources.listeners[${i}]`;
    const listener = asNode(l, lAt);
    const name = str(listener, 'name', lAt) ?? `listeners[${i}]`;
    list(listener, 'filter_chains', lAt).forEach((c, j) => {
      const chAt = `${lAt}.filter_chains[${j}]`;
      const source = `listener ${name} chain[${j}]`;
      const filters = list(asNode(c, chAt), 'filters', chAt).map((f, k) =>
        asNode(f, `${chAt}.filters[${k}]`),
      );
      filters.forEach((filter, k) => {
        const type = typeOf(filter);
        if (type !== NETWORK_RATELIMIT_TYPE && type !== HCM_TYPE) return;
        const fAt = `${chAt}.filters[${k}]`;
        // Only rate-limit filters may come first: any other could close or alter the connection.
        const other = filters.slice(0, k).find((f) => typeOf(f) !== NETWORK_RATELIMIT_TYPE);
        if (other !== undefined)
          unsupported(fAt, `a network filter before it (${String(other.name)})`);
        const config = asNode(field(filter, 'typed_config'), `${fAt}.typed_config`);
        if (type === NETWORK_RATELIMIT_TYPE) {
          tcp.push(compileTcp(config, `${fAt}.typed_config`, source));
        } else {
          const model = compileHttp(config, `${fAt}.typed_config`, source, localCluster);
          if (model !== undefined) http.push(model);
        }
      });
    });
  });
  return {
    http,
    tcp,
    shapes: () => [...http.flatMap((h) => h.shapes()), ...tcp.flatMap((t) => t.shapes())],
  };
}
