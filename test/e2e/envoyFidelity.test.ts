import { readFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { parse } from 'yaml';
import { loadRules } from '../../src/rules/loadRules.js';
import { matchRule } from '../../src/rules/match.js';
import { rulesInFileOrder } from '../../src/rules/parseRules.js';
import type { DomainRules, Limit, RuleNode } from '../../src/rules/types.js';
import {
  formatShape,
  loadEnvoyModel,
  type DescriptorShape,
  type Entry,
  type HttpAnswer,
  type HttpRequest,
} from '../support/envoyActions.js';
import { resetMs, startTollgate, type Tollgate } from '../support/tollgate.js';

// The requests Envoy would send for real HTTP requests and connections, built by the model of
// Envoy from envoy/envoy.yaml, against tollgate running envoy/ratelimit.yaml, judged by what the
// client would see. Paths, headers and limits all come from the two files: rules are found by
// their `name`, and a request that reaches a rule is found among requests built from the
// Envoy config's own literals. Each case uses its own tenants and addresses.

const ENVOY_YAML = fileURLToPath(new URL('../../envoy/envoy.yaml', import.meta.url));
const RULES_YAML = fileURLToPath(new URL('../../envoy/ratelimit.yaml', import.meta.url));

const envoy = loadEnvoyModel(ENVOY_YAML);
const rulesText = readFileSync(RULES_YAML, 'utf8');
const domains = [...loadRules(RULES_YAML, { defaultAlgorithm: 'sliding_window' }).domains.values()];
if (domains.length !== 1) throw new Error('expected one domain in ratelimit.yaml');
const rules: DomainRules = domains[0]!;
if (envoy.http.length !== 1) throw new Error('expected one HTTP rate-limit filter');
const http = envoy.http[0]!;

const tenantKey = rules.tenantKey ?? 'tenant';
const tenantHeaders = http.headersFor(tenantKey);
if (tenantHeaders.length !== 1) throw new Error(`expected one header for '${tenantKey}'`);
const tenantHeader = tenantHeaders[0]!;

/** The rule a descriptor lands on, as tollgate matches it. */
const ruleOf = (entries: readonly Entry[]): RuleNode | undefined => matchRule(rules, entries);

function named(name: string): RuleNode & { limit: Limit } {
  const node = rulesInFileOrder(rules.root).find((n) => n.limit?.name === name);
  if (node?.limit === undefined) throw new Error(`no rule named '${name}' in ratelimit.yaml`);
  return node as RuleNode & { limit: Limit };
}

/** RateLimit-Policy as tollgate writes it: a bucket's burst over its fill time, else the window. */
function policy({ name, algorithm, burst, requestsPerUnit, windowMs }: Limit): string {
  const seconds =
    algorithm === 'token_bucket'
      ? Math.ceil((burst * windowMs) / requestsPerUnit / 1000)
      : windowMs / 1000;
  return `"${name}";q=${algorithm === 'token_bucket' ? burst : requestsPerUnit};w=${seconds}`;
}

/**
 * A request whose descriptors reach rule `name`: among the model's probe requests (built from
 * envoy.yaml's literals), with or without a tenant, the one that reaches the fewest rules.
 */
function reaching(name: string, withTenant: boolean): HttpRequest {
  const target = named(name);
  const candidates = http
    .probeRequests()
    .filter((r) => (r.headers?.[tenantHeader] !== undefined) === withTenant)
    .map((r) => ({ r, reached: new Set(http.descriptorsFor(r).map(ruleOf)) }))
    .filter(({ reached }) => reached.has(target))
    .sort((a, b) => a.reached.size - b.reached.size);
  const best = candidates[0]?.r;
  if (best === undefined) throw new Error(`no request reaches rule '${name}'`);
  return best;
}

/** `request` sent from `address`, for `tenant` (undefined: without the tenant header). */
function from(request: HttpRequest, address: string, tenant?: string): HttpRequest {
  const headers = Object.fromEntries(
    Object.entries(request.headers ?? {}).filter(([name]) => name !== tenantHeader),
  );
  if (tenant !== undefined) headers[tenantHeader] = tenant;
  return { ...request, headers, clientAddress: address };
}

let tollgate: Tollgate;
beforeEach(async () => {
  tollgate = await startTollgate({ rules: rulesText });
});
afterEach(async () => {
  await tollgate.stop();
});

const send = (request: HttpRequest): Promise<HttpAnswer> =>
  http.send(request, (call) => tollgate.check(call));

let nextAddress = 1;
/** An address no other request in this file uses. */
const freshAddress = (): string =>
  `198.51.${Math.floor(nextAddress / 250)}.${(nextAddress++ % 250) + 1}`;

/** Sends `count` requests in turn; returns the statuses, every answer and the last. */
async function sendAll(count: number, request: (i: number) => HttpRequest) {
  const answers: HttpAnswer[] = [];
  for (let i = 0; i < count; i++) answers.push(await send(request(i)));
  return { statuses: answers.map((a) => a.status), answers, last: answers[answers.length - 1]! };
}

/**
 * Retry-After is exact to the second: a second before it the request is still turned away, and
 * once it has passed the request goes through.
 */
async function expectRetryAfterHonest(
  denied: HttpAnswer,
  request: () => HttpRequest,
): Promise<void> {
  const seconds = Number(denied.headers['retry-after']);
  expect(seconds).toBeGreaterThan(0);
  tollgate.clock.advance((seconds - 1) * 1000);
  expect((await send(request())).status).toBe(429);
  tollgate.clock.advance(1000);
  expect((await send(request())).status).toBe(200);
}

const times = (n: number, status: number): number[] => Array<number>(n).fill(status);

describe('HTTP requests through Envoy', () => {
  it('tenant token bucket: the burst goes through, then 429 until a token refills', async () => {
    const { limit } = named('tenant');
    expect(limit.algorithm).toBe('token_bucket');
    const request = reaching('tenant', true);
    // A new address each time, so that only the tenant's bucket can bind.
    const next = () => from(request, freshAddress(), 'bucket-tenant');
    const { statuses, answers, last } = await sendAll(limit.burst + 1, next);
    expect(statuses).toEqual([...times(limit.burst, 200), 429]);
    // Envoy adds tollgate's headers to the upstream's answer too, without Retry-After.
    expect(answers[0]!.headers).toEqual({
      'ratelimit-policy': policy(limit),
      ratelimit: `"${limit.name}";r=${limit.burst - 1};t=${Math.ceil(limit.windowMs / limit.requestsPerUnit / 1000)}`,
    });
    const refillMs = limit.windowMs / limit.requestsPerUnit;
    expect(last.headers).toMatchObject({
      'x-envoy-ratelimited': 'true',
      'ratelimit-policy': policy(limit),
      ratelimit: `"${limit.name}";r=0;t=${Math.ceil(refillMs / 1000)}`,
      'retry-after': String(Math.ceil(refillMs / 1000)),
    });
    tollgate.clock.advance(refillMs);
    expect((await send(next())).status).toBe(200);
    expect((await send(next())).status).toBe(429);
  });

  it('per-route sliding window: the route limit binds before the tenant bucket', async () => {
    const { limit } = named('tenant-orders');
    expect(limit.algorithm).toBe('sliding_window');
    // This case assumes the route limit is tighter than the tenant's burst.
    expect(limit.requestsPerUnit).toBeLessThan(named('tenant').limit.burst);
    const request = reaching('tenant-orders', true);
    const next = () => from(request, freshAddress(), 'orders-tenant');
    const { statuses, last } = await sendAll(limit.requestsPerUnit + 1, next);
    expect(statuses).toEqual([...times(limit.requestsPerUnit, 200), 429]);
    expect(last.headers['ratelimit-policy']).toBe(policy(limit));
    expect(last.headers.ratelimit).toMatch(new RegExp(`^"${limit.name}";r=0;t=\\d+$`));
    await expectRetryAfterHonest(last, next);
    // The same route for another tenant was never limited.
    expect((await send(from(request, freshAddress(), 'orders-other-tenant'))).status).toBe(200);
  });

  it('exports: the 30 s window allows its quota, then 429 until Retry-After', async () => {
    const { limit } = named('tenant-exports');
    const request = reaching('tenant-exports', true);
    const next = () => from(request, freshAddress(), 'exports-tenant');
    const { statuses, last } = await sendAll(limit.requestsPerUnit + 1, next);
    expect(statuses).toEqual([...times(limit.requestsPerUnit, 200), 429]);
    expect(last.headers['ratelimit-policy']).toBe(policy(limit));
    // A sliding window still weighs the previous window at the start of the next one, so a quota
    // spent as a window opens is free again only some time after that window has closed.
    if (limit.algorithm === 'sliding_window' && tollgate.clock.now % limit.windowMs === 0) {
      expect(Number(last.headers['retry-after'])).toBeGreaterThan(limit.windowMs / 1000);
    }
    await expectRetryAfterHonest(last, next);
  });

  it('per-address fixed window: one address, whatever the tenant or none, on any route', async () => {
    const { limit } = named('per-address');
    expect(limit.algorithm).toBe('fixed_window');
    const address = freshAddress();
    const withTenant = reaching('per-address', true);
    const withoutTenant = reaching('per-address', false);
    const next = (i: number) =>
      i % 2 === 0 ? from(withoutTenant, address) : from(withTenant, address, `address-tenant-${i}`);
    const { statuses, last } = await sendAll(limit.requestsPerUnit + 1, next);
    expect(statuses).toEqual([...times(limit.requestsPerUnit, 200), 429]);
    expect(last.headers['ratelimit-policy']).toBe(policy(limit));
    // A fixed window's reset is the rest of the window.
    const left = limit.windowMs - (tollgate.clock.now % limit.windowMs);
    expect(last.headers['retry-after']).toBe(String(Math.ceil(left / 1000)));
    await expectRetryAfterHonest(last, () => next(1));
    // Another address was never limited.
    expect((await send(from(withoutTenant, freshAddress()))).status).toBe(200);
  });

  it('shadow mode: a shadow rule over its limit never turns a request away by itself', async () => {
    const shadows = rulesInFileOrder(rules.root).filter((n) => n.shadowMode && n.limit);
    expect(shadows.length).toBeGreaterThan(0);
    for (const shadow of shadows) {
      const limit = shadow.limit!;
      const bucket = named('tenant').limit;
      // Past the shadow limit, within the tenant's burst.
      expect(limit.requestsPerUnit + 1).toBeLessThan(bucket.burst);
      const request = reaching(limit.name, true);
      const next = () => from(request, freshAddress(), `shadow-${limit.name}`);
      const { statuses, last } = await sendAll(limit.requestsPerUnit + 2, next);
      expect(statuses).toEqual(times(limit.requestsPerUnit + 2, 200));
      // Shadow rules are left out of the headers; the call itself says OK for the shadow rule.
      expect(last.headers['ratelimit-policy']).not.toContain(`"${limit.name}"`);
      const call = http.requestFor(next())!;
      const response = await tollgate.check(call);
      const index = call.descriptors!.findIndex((d) => ruleOf(d.entries as Entry[]) === shadow);
      expect(response.statuses![index]!.code).toBe('OK');
      // What finally turns the tenant away is the tenant's own bucket.
      const rest = await sendAll(bucket.burst, next);
      expect(rest.last.status).toBe(429);
      expect(rest.last.headers['ratelimit-policy']).toBe(policy(bucket));
    }
  });

  it('without a tenant header the tenant descriptors are dropped; only the address counts', async () => {
    for (const probe of http.probeRequests()) {
      for (const entries of http.descriptorsFor(from(probe, probe.clientAddress ?? ''))) {
        expect(entries.map((e) => e.key)).not.toContain(tenantKey);
      }
    }
    // Past the route's limit on that route, from new addresses: nothing counts the tenant.
    const orders = named('tenant-orders').limit;
    const request = reaching('tenant-orders', true);
    const next = () => from(request, freshAddress());
    const sent = http.requestFor(next())!.descriptors!;
    expect(sent.map((d) => ruleOf(d.entries as Entry[]))).not.toContain(named(orders.name));
    const { statuses } = await sendAll(orders.requestsPerUnit + 1, next);
    expect(statuses).toEqual(times(orders.requestsPerUnit + 1, 200));
  });

  it('per-address counts the address Envoy trusts, X-Forwarded-For unless use_remote_address', async () => {
    const { limit } = named('per-address');
    const request = from(reaching('per-address', false), freshAddress());
    const next = (i: number): HttpRequest => ({
      ...request,
      headers: { ...request.headers, 'x-forwarded-for': `203.0.113.${i + 1}` },
    });
    const counted = new Set(
      Array.from(
        { length: limit.requestsPerUnit + 1 },
        (_, i) =>
          http
            .descriptorsFor(next(i))
            .flat()
            .find((e) => e.key === 'remote_address')?.value,
      ),
    );
    const { last } = await sendAll(limit.requestsPerUnit + 1, next);
    // One counter (the peer's): the last request is over. One per X-Forwarded-For value, as with
    // use_remote_address unset: a client that writes the header is never limited by address.
    expect(last.status).toBe(counted.size === 1 ? 429 : 200);
  });
});

describe("the sample's defences at the edge", () => {
  it('a client cannot dodge the per-address limit by writing X-Forwarded-For', async () => {
    const { limit } = named('per-address');
    const request = from(reaching('per-address', false), freshAddress());
    const forged = (i: number): HttpRequest => ({
      ...request,
      headers: { ...request.headers, 'x-forwarded-for': `203.0.113.${i + 1}` },
    });
    const { statuses } = await sendAll(limit.requestsPerUnit + 1, forged);
    expect(statuses).toEqual([...times(limit.requestsPerUnit, 200), 429]);
  });

  it('spellings of one path share its limit: dot segments, doubled slashes, escapes', async () => {
    const { limit } = named('tenant-exports');
    const request = reaching('tenant-exports', true);
    const path = request.path; // e.g. /reports/export/...
    const [, first, ...rest] = path.split('/');
    const spellings = [
      `//${first}/./${rest.join('//')}`,
      `/${first}/x/../${rest.join('/')}`,
      `/${first}/${rest.join('/').replace(/^e/, '%65')}`,
    ];
    const next = (i: number) =>
      from(
        { ...request, path: spellings[i % spellings.length]! },
        freshAddress(),
        'spelling-tenant',
      );
    const { statuses } = await sendAll(limit.requestsPerUnit + 1, next);
    expect(statuses).toEqual([...times(limit.requestsPerUnit, 200), 429]);
  });
});

describe('TCP connections through Envoy', () => {
  it('the listener limit closes the connection past its limit, until the next window', async () => {
    expect(envoy.tcp.length).toBeGreaterThan(0);
    for (const tcp of envoy.tcp) {
      const reached = tcp.descriptors.map(ruleOf);
      const rule = reached.find((n) => n?.limit !== undefined);
      if (rule?.limit === undefined) throw new Error(`${tcp.source} reaches no limited rule`);
      const { algorithm, burst, requestsPerUnit } = rule.limit;
      const allowed = algorithm === 'token_bucket' ? burst : requestsPerUnit;
      const connect = async () => {
        const response = await tollgate.check(tcp.requestFor());
        return { outcome: tcp.answer(response), response };
      };
      const outcomes: string[] = [];
      for (let i = 0; i < allowed; i++) outcomes.push((await connect()).outcome);
      const refused = await connect();
      expect([...outcomes, refused.outcome]).toEqual([
        ...Array<string>(allowed).fill('open'),
        'closed',
      ]);
      // A new connection is let in once the counter resets.
      const waits = refused.response.statuses!.map((s) => resetMs(s) ?? 0);
      tollgate.clock.advance(Math.max(...waits));
      expect((await connect()).outcome).toBe('open');
    }
  });
});

// --- Reachability: what Envoy can send, against what the rules can match.

/** Every rule with a rate_limit, walking the YAML tree itself (not tollgate's parse of it). */
function limitedRulePaths(): string[] {
  const paths: string[] = [];
  const walk = (descriptors: unknown, path: string) => {
    if (!Array.isArray(descriptors)) return;
    descriptors.forEach((d: unknown, i) => {
      const at = `${path}descriptors[${i}]`;
      if (typeof d !== 'object' || d === null) return;
      const node = d as Record<string, unknown>;
      if (node.rate_limit !== undefined) paths.push(at);
      walk(node.descriptors, `${at}.`);
    });
  };
  walk((parse(rulesText, { version: '1.1' }) as { descriptors?: unknown }).descriptors, '');
  return paths;
}

/**
 * The rules a shape can land on. A value the request supplies is tried as every value the rules
 * name for that key, a value for each wildcard, and a value they do not name; tollgate's own
 * matcher decides each.
 */
function rulesReachedBy(shape: DescriptorShape, domain: DomainRules): Set<RuleNode> {
  const nodes = rulesInFileOrder(domain.root);
  const candidates = shape.entries.map((entry) => {
    if (entry.value !== undefined) return [entry.value];
    const values = new Set(['value-no-rule-names']);
    for (const n of nodes) {
      if (n.key !== entry.key || n.value === undefined) continue;
      values.add(n.value.replaceAll('*', ''));
      values.add(n.value.replaceAll('*', 'x'));
    }
    return [...values];
  });
  let combos: Entry[][] = [[]];
  shape.entries.forEach((entry, i) => {
    combos = combos.flatMap((c) =>
      candidates[i]!.map((value) => [...c, { key: entry.key, value }]),
    );
  });
  const reached = new Set<RuleNode>();
  for (const entries of combos) {
    const node = entries.length === 0 ? undefined : matchRule(domain, entries);
    if (node !== undefined) reached.add(node);
  }
  return reached;
}

describe('the Envoy config and the rules, side by side', () => {
  it('the rules load, and their domain is the domain of every rate-limit filter', () => {
    for (const filter of [...envoy.http, ...envoy.tcp]) {
      expect(filter.domain, filter.source).toBe(rules.domain);
    }
  });

  it('every descriptor shape of envoy.yaml is sent for some request', () => {
    const sent = new Set(
      http
        .probeRequests()
        .flatMap((r) => http.trace(r).descriptors)
        .map((d) => `${d.source} ${formatShape(d.entries.map((e) => ({ key: e.key })))}`),
    );
    const never = http
      .shapes()
      .map((s) => `${s.source} ${formatShape(s.entries.map((e) => ({ key: e.key })))}`)
      .filter((s) => !sent.has(s));
    expect(never, 'descriptors no request can make Envoy send').toEqual([]);
  });

  it('every shape lands on a rule, and every rule with a limit is reached by some shape', () => {
    const reached = new Set<string>();
    const unmatched: string[] = [];
    for (const shape of envoy.shapes()) {
      const nodes = rulesReachedBy(shape, rules);
      if (nodes.size === 0) unmatched.push(`${shape.source}: ${formatShape(shape.entries)}`);
      for (const n of nodes) reached.add(n.path);
    }
    const byPath = new Map(rulesInFileOrder(rules.root).map((n) => [n.path, n]));
    const unreachable = limitedRulePaths()
      .filter((path) => !reached.has(path))
      .map((path) => `${path} (${byPath.get(path)?.limit?.name ?? 'unlimited'})`);
    // Shapes Envoy sends that match no rule; rules with a limit that no shape reaches.
    expect({ unmatched, unreachable }).toEqual({ unmatched: [], unreachable: [] });
  });
});
