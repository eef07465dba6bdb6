// Redis counter keys: two different descriptors never share a counter whatever bytes they hold,
// every counter of one tenant shares one Redis Cluster hash tag (and other tenants do not), and
// CACHE_KEY_PREFIX starts every key.
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import type { Entry } from '../../src/core/check.js';
import { counterKey, referenceKey, referenceWindowKey, tenantIndex } from '../../src/store/keys.js';
import type { Algorithm } from '../../src/rules/types.js';

/** What Redis Cluster hashes: the text between the first '{' and the next '}'. */
function hashTag(key: string): string {
  const open = key.indexOf('{');
  const close = key.indexOf('}', open + 1);
  expect(open).toBeGreaterThanOrEqual(0);
  expect(close).toBeGreaterThan(open + 1);
  return key.slice(open + 1, close);
}

// Short strings over an alphabet rich in separators, escapes and multi-byte characters, so that
// ambiguous encodings would show up as collisions.
const char = fc.constantFrom(
  'a',
  'b',
  '{',
  '}',
  '\\',
  ':',
  '|',
  '1',
  '2',
  'é',
  '日',
  '😀',
  '(',
  ')',
);
const text = fc.array(char, { maxLength: 4 }).map((chars) => chars.join(''));
const KEYS = ['tenant', 'route', 'a', '1:', '{'];
// Keys are never empty: the service rejects an empty key before anything is keyed.
const nonEmpty = fc.array(char, { minLength: 1, maxLength: 4 }).map((chars) => chars.join(''));
const entry = fc.record({ key: fc.oneof(fc.constantFrom(...KEYS), nonEmpty), value: text });
const entries = fc.array(entry, { minLength: 1, maxLength: 4 });
const algorithm = fc.constantFrom<Algorithm>('fixed_window', 'sliding_window', 'token_bucket');
const counter = fc.record({
  domain: fc.oneof(fc.constantFrom('api', 'web'), text),
  entries,
  algorithm,
  windowMs: fc.constantFrom(1_000, 30_000, 60_000, 11_000),
});
type Counter = { domain: string; entries: Entry[]; algorithm: Algorithm; windowMs: number };
// tenant_key belongs to a domain's rules, so both descriptors of a pair are keyed with the same one.
const anyTenantKey = fc.option(fc.constantFrom(...KEYS), { nil: undefined });

const keyOf = (c: Counter, tenant: string | undefined, prefix = '') =>
  counterKey(prefix, c.domain, c.entries, tenant, c.algorithm, c.windowMs);

describe('counterKey', () => {
  it('is injective: different descriptors never share a key', () => {
    fc.assert(
      fc.property(anyTenantKey, counter, counter, (tenant, a, b) => {
        const same = keyOf(a, tenant) === keyOf(b, tenant);
        expect(same, `${JSON.stringify(a)} vs ${JSON.stringify(b)}`).toBe(
          JSON.stringify(a) === JSON.stringify(b),
        );
      }),
      { numRuns: 20_000 },
    );
  });

  it('is injective on near-identical descriptors: one entry changed, moved or re-split', () => {
    // Random pairs rarely come close; these mutations are where an ambiguous encoding would show.
    const mutation = fc.oneof(
      fc.record({ kind: fc.constant('replace' as const), at: fc.nat(), entry }),
      fc.record({ kind: fc.constant('move' as const), at: fc.nat(), to: fc.nat() }),
      fc.record({ kind: fc.constant('resplit' as const), at: fc.nat(), cut: fc.nat() }),
    );
    fc.assert(
      fc.property(anyTenantKey, counter, mutation, (tenant, a, m) => {
        const changed = [...a.entries];
        const at = m.at % changed.length;
        const old = changed[at] as Entry;
        if (m.kind === 'replace') changed[at] = m.entry;
        if (m.kind === 'move') changed.splice(m.to % changed.length, 0, ...changed.splice(at, 1));
        if (m.kind === 'resplit') {
          const joined = old.key + old.value;
          const cut = 1 + (m.cut % Math.max(1, joined.length));
          changed[at] = { key: joined.slice(0, cut), value: joined.slice(cut) };
        }
        const b = { ...a, entries: changed };
        const same = keyOf(a, tenant) === keyOf(b, tenant);
        expect(same, `${JSON.stringify(a)} vs ${JSON.stringify(b)}, tenant_key ${tenant}`).toBe(
          JSON.stringify(a.entries) === JSON.stringify(changed),
        );
      }),
      { numRuns: 10_000 },
    );
  });

  it('keeps the tenant entry in place: reordering the entries gives another key', () => {
    const a = [
      { key: 'route', value: '/orders' },
      { key: 'tenant', value: 'acme' },
    ];
    const b = [
      { key: 'tenant', value: 'acme' },
      { key: 'route', value: '/orders' },
    ];
    expect(counterKey('', 'api', a, 'tenant', 'fixed_window', 60_000)).not.toBe(
      counterKey('', 'api', b, 'tenant', 'fixed_window', 60_000),
    );
  });

  it('gives one hash tag to every counter of a tenant, and another to other tenants', () => {
    fc.assert(
      fc.property(
        fc.constantFrom('api', '{x}'),
        text,
        text,
        fc.array(entry, { maxLength: 3 }),
        fc.array(entry, { maxLength: 3 }),
        algorithm,
        algorithm,
        (domain, tenantA, tenantB, routeA, routeB, algA, algB) => {
          const tenantKey = 'tenant';
          const noTenant = (list: Entry[]) => list.filter((e) => e.key !== tenantKey);
          const a1 = [...noTenant(routeA), { key: tenantKey, value: tenantA }];
          const a2 = [{ key: tenantKey, value: tenantA }, ...noTenant(routeB)];
          const b = [{ key: tenantKey, value: tenantB }, ...noTenant(routeA)];
          const tagA1 = hashTag(counterKey('', domain, a1, tenantKey, algA, 60_000));
          const tagA2 = hashTag(counterKey('', domain, a2, tenantKey, algB, 1_000));
          const tagB = hashTag(counterKey('', domain, b, tenantKey, algA, 60_000));
          expect(tagA1).toBe(tagA2);
          expect(tagA1 === tagB).toBe(tenantA === tenantB);
        },
      ),
      { numRuns: 5_000 },
    );
  });

  it('takes the hash tag of different domains apart, for the same tenant', () => {
    const tenant = [{ key: 'tenant', value: 'acme' }];
    expect(hashTag(counterKey('', 'api', tenant, undefined, 'token_bucket', 1_000))).not.toBe(
      hashTag(counterKey('', 'web', tenant, undefined, 'token_bucket', 1_000)),
    );
  });

  it('makes the tenant_key entry the tenant, else the first entry', () => {
    const list = [
      { key: 'route', value: '/x' },
      { key: 'tenant', value: 'acme' },
    ];
    expect(tenantIndex(list, 'tenant')).toBe(1);
    expect(tenantIndex(list, undefined)).toBe(0);
    expect(tenantIndex(list, 'missing')).toBe(0);
    const tagged = hashTag(counterKey('', 'api', list, 'tenant', 'sliding_window', 60_000));
    expect(tagged).toContain('acme');
    expect(tagged).not.toContain('/x');
    const plain = hashTag(counterKey('', 'api', list, undefined, 'sliding_window', 60_000));
    expect(plain).toContain('/x');
    expect(plain).not.toContain('acme');
  });

  it('makes a single-entry descriptor its own tenant', () => {
    const address = (ip: string) => [{ key: 'remote_address', value: ip }];
    const one = counterKey('', 'api', address('10.0.0.1'), 'tenant', 'fixed_window', 1_000);
    const two = counterKey('', 'api', address('10.0.0.2'), 'tenant', 'fixed_window', 1_000);
    expect(hashTag(one)).toContain('10.0.0.1');
    expect(hashTag(one)).not.toBe(hashTag(two));
  });

  it('prepends CACHE_KEY_PREFIX to every key', () => {
    fc.assert(
      fc.property(counter, anyTenantKey, (c, tenant) => {
        const key = keyOf(c, tenant, 'prod:');
        expect(key.startsWith('prod:')).toBe(true);
        expect(key).toBe(`prod:${keyOf(c, tenant)}`);
        expect(hashTag(key)).toBe(hashTag(keyOf(c, tenant)));
      }),
    );
  });
});

describe('counterKey with long values', () => {
  const long = (n: number, fill = 'x') => fill.repeat(n);
  // Values around and far past the point where a part is hashed, in several alphabets.
  const longText = fc
    .tuple(fc.constantFrom('a', 'é', '日', '{', '}'), fc.integer({ min: 20, max: 1_200 }))
    .map(([fill, n]) => fill.repeat(n));
  const anyText = fc.oneof(text, longText);
  const longCounter = fc.record({
    domain: fc.constantFrom('api', long(200)),
    entries: fc.array(fc.record({ key: fc.constantFrom('tenant', 'route'), value: anyText }), {
      minLength: 1,
      maxLength: 4,
    }),
    algorithm,
    windowMs: fc.constantFrom(1_000, 60_000),
  });

  it('spells out keys whose parts fit, as they always were', () => {
    const entries = [
      { key: 'tenant', value: 'acme' },
      { key: 'route', value: '/orders' },
    ];
    expect(counterKey('', 'api', entries, undefined, 'sliding_window', 30_000)).toBe(
      'tg:{3:api6:tenant4:acme}0|5:route7:/orders|sw:30000',
    );
  });

  it('stays short and injective, and keeps one hash tag per tenant, however long the values', () => {
    fc.assert(
      fc.property(longCounter, longCounter, (a, b) => {
        const keyA = keyOf(a, 'tenant');
        const keyB = keyOf(b, 'tenant');
        expect(Buffer.byteLength(keyA)).toBeLessThanOrEqual(260);
        const same = JSON.stringify(a) === JSON.stringify(b);
        expect(keyA === keyB).toBe(same);
        // The same tenant under another route and algorithm: the same slot.
        const tenant = a.entries.find((e) => e.key === 'tenant') ?? a.entries[0]!;
        const other = counterKey(
          '',
          a.domain,
          [tenant, { key: 'route', value: long(500) }],
          'tenant',
          'token_bucket',
          7_000,
        );
        expect(hashTag(other)).toBe(hashTag(keyA));
      }),
      { numRuns: 2_000 },
    );
  });

  it('hashes the largest descriptor a request may hold into a key of about 250 bytes', () => {
    const entries = Array.from({ length: 16 }, (_, i) => ({
      key: `${i}${long(1_023)}`,
      value: long(1_024, '日').slice(0, 341),
    }));
    const key = counterKey(
      'edge1:',
      long(1_024),
      entries,
      undefined,
      'sliding_window',
      31_536_000_000,
    );
    expect(key).toMatch(/^edge1:tg:\{#[A-Za-z0-9_-]{22}\}0\|#[A-Za-z0-9_-]{22}\|sw:31536000000$/);
  });
});

describe("referenceKey: envoyproxy/ratelimit's own key (COMPAT_KEYS=reference)", () => {
  const entries: Entry[] = [
    { key: 'tenant', value: 'acme' },
    { key: 'path', value: 'api/*' },
  ];

  it('joins the prefix, domain, keys and values with _, then the window start in seconds', () => {
    const key = referenceKey('edge-', 'web', entries);
    expect(key).toBe('edge-web_tenant_acme_path_api/*_');
    // 2026-12-05T10:17:42.500Z: the hour began at 10:00, the day at midnight, a 30-day month
    // and a 365-day year at their multiples since the epoch.
    const now = Date.UTC(2026, 11, 5, 10, 17, 42, 500);
    const seconds = (ms: number) => Math.floor(ms / 1000);
    expect(referenceWindowKey(key, 1_000, now)).toBe(`${key}${seconds(now)}`);
    expect(referenceWindowKey(key, 3_600_000, now)).toBe(
      `${key}${seconds(Date.UTC(2026, 11, 5, 10))}`,
    );
    expect(referenceWindowKey(key, 86_400_000, now)).toBe(
      `${key}${seconds(Date.UTC(2026, 11, 5))}`,
    );
    const month = 2_592_000;
    expect(referenceWindowKey(key, month * 1000, now)).toBe(
      `${key}${seconds(now) - (seconds(now) % month)}`,
    );
  });

  it('escapes nothing, as the reference does: such descriptors share a key', () => {
    expect(referenceKey('', 'd', [{ key: 'a_b', value: 'c' }])).toBe(
      referenceKey('', 'd', [{ key: 'a', value: 'b_c' }]),
    );
  });
});
