// Properties of the pure code a hostile caller reaches first: the request decoder (any bytes at
// all), rule matching (any entries against any rules) and key encoding (any bytes in a tenant).
// codec.test.ts, explain.test.ts and keys.test.ts hold the worked examples; these add what only
// random inputs find: a throw, a slow input, a request over a bound that slips through, a match
// that disagrees with a plain model of the reference's precedence, a malformed hash tag.
import fc from 'fast-check';
import { parseDocument } from 'yaml';
import { describe, expect, it } from 'vitest';
import type { Check, Entry } from '../../src/core/check.js';
import { InvalidRequestError } from '../../src/core/errors.js';
import { createRequestDecoder, type DecodedRequest } from '../../src/servers/grpc/codec.js';
import { loadProtoRoot } from '../../src/core/protos.js';
import { counterKey, tenantIndex } from '../../src/store/keys.js';
import { explainMatch } from '../../src/rules/explain.js';
import { matchRule, matchesParts } from '../../src/rules/match.js';
import { parseRules } from '../../src/rules/parseRules.js';
import type { Algorithm } from '../../src/rules/types.js';

const LIMITS = { maxDescriptors: 6, maxEntries: 4, maxEntryBytes: 24 };
const decode = createRequestDecoder(LIMITS);
const RequestType = loadProtoRoot('strings').lookupType(
  'envoy.service.ratelimit.v3.RateLimitRequest',
);
const encode = (request: object): Buffer =>
  Buffer.from(RequestType.encode(RequestType.fromObject(request)).finish());

/** Decodes, timing the call; the decoder must answer a value, never throw. */
let slowest: { ms: number; bytes: Buffer } = { ms: 0, bytes: Buffer.alloc(0) };
function timedDecode(bytes: Buffer): DecodedRequest {
  const started = performance.now();
  const decoded = decode(bytes);
  const ms = performance.now() - started;
  if (ms > slowest.ms) slowest = { ms, bytes };
  return decoded;
}

/** The best of three timings: a pause of the machine shows in one, slow code in all three. */
function bestOfThree(run: () => unknown): number {
  let best = Infinity;
  for (let i = 0; i < 3; i++) {
    const started = performance.now();
    run();
    best = Math.min(best, performance.now() - started);
  }
  return best;
}

/** What every accepted request satisfies, whatever bytes it came from. */
function expectWithinBounds(check: Check): void {
  const bytes = (text: string) => Buffer.byteLength(text);
  expect(check.domain).not.toBe('');
  expect(bytes(check.domain)).toBeLessThanOrEqual(LIMITS.maxEntryBytes);
  expect(check.descriptors.length).toBeGreaterThan(0);
  expect(check.descriptors.length).toBeLessThanOrEqual(LIMITS.maxDescriptors);
  for (const descriptor of check.descriptors) {
    expect(descriptor.entries.length).toBeGreaterThan(0);
    expect(descriptor.entries.length).toBeLessThanOrEqual(LIMITS.maxEntries);
    for (const { key, value } of descriptor.entries) {
      expect(key).not.toBe('');
      expect(bytes(key)).toBeLessThanOrEqual(LIMITS.maxEntryBytes);
      expect(bytes(value)).toBeLessThanOrEqual(LIMITS.maxEntryBytes);
      // Valid UTF-8 in, so the text never holds a replacement for bytes it could not read.
      expect(key + value).not.toContain('\uFFFD');
    }
    expect(Number.isInteger(check.hitsAddend) && check.hitsAddend >= 0).toBe(true);
    if (descriptor.hitsAddend !== undefined) {
      expect(descriptor.hitsAddend >= 0n && descriptor.hitsAddend < 2n ** 64n).toBe(true);
    }
  }
}

// Text of at most 6 code points of any plane (at most 24 UTF-8 bytes, the bound), with no
// U+FFFD so that the check above stays meaningful.
const anyText = (minLength: number) =>
  fc.string({ unit: 'binary', minLength, maxLength: 6 }).filter((text) => !text.includes('\uFFFD'));
const entryArb = fc.record({ key: anyText(1), value: anyText(0) });
const UNITS = ['SECOND', 'MINUTE', 'HOUR', 'DAY', 'MONTH', 'YEAR'] as const;
const descriptorArb = fc.record(
  {
    entries: fc.array(entryArb, { minLength: 1, maxLength: LIMITS.maxEntries }),
    limit: fc.record({
      requests_per_unit: fc.nat({ max: 0xffffffff }),
      unit: fc.constantFrom(...UNITS),
    }),
    hits_addend: fc.bigInt({ min: 0n, max: 2n ** 64n - 1n }),
  },
  { requiredKeys: ['entries'] },
);
const requestArb = fc.record({
  domain: anyText(1),
  descriptors: fc.array(descriptorArb, { minLength: 1, maxLength: LIMITS.maxDescriptors }),
  hits_addend: fc.nat({ max: 0xffffffff }),
});
type RequestShape = typeof requestArb extends fc.Arbitrary<infer T> ? T : never;

const toWire = (request: RequestShape) => ({
  ...request,
  descriptors: request.descriptors.map((descriptor) => ({
    ...descriptor,
    hits_addend:
      descriptor.hits_addend === undefined ? undefined : { value: String(descriptor.hits_addend) },
  })),
});

describe('the request decoder', () => {
  it('round-trips every valid request: domain, entries, overrides and both costs', () => {
    fc.assert(
      fc.property(requestArb, (request) => {
        const decoded = timedDecode(encode(toWire(request)));
        if (!decoded.ok) throw decoded.error;
        expect(decoded.check).toEqual({
          domain: request.domain,
          hitsAddend: request.hits_addend,
          descriptors: request.descriptors.map((d) => ({
            entries: d.entries,
            ...(d.limit && {
              limit: {
                requestsPerUnit: d.limit.requests_per_unit,
                unit: d.limit.unit.toLowerCase(),
              },
            }),
            ...(d.hits_addend !== undefined && { hitsAddend: d.hits_addend }),
          })),
        });
      }),
      { numRuns: 1_000 },
    );
  });

  it('answers any bytes with a value, never a throw, and lets nothing over a bound through', () => {
    fc.assert(
      fc.property(fc.uint8Array({ maxLength: 4_096 }), (raw) => {
        const decoded = timedDecode(Buffer.from(raw));
        if (decoded.ok) expectWithinBounds(decoded.check);
        else expect(decoded.error).toBeInstanceOf(InvalidRequestError);
      }),
      { numRuns: 5_000 },
    );
  });

  it('answers mutated valid requests (flipped, cut, spliced bytes) the same way', () => {
    // Random bytes rarely get past the first tag; mutations of a valid request reach the checks
    // of counts, lengths, UTF-8 and wire types deep inside it.
    const mutation = fc.oneof(
      fc.record({ kind: fc.constant('flip' as const), at: fc.nat(), byte: fc.nat(255) }),
      fc.record({ kind: fc.constant('cut' as const), at: fc.nat() }),
      fc.record({ kind: fc.constant('insert' as const), at: fc.nat(), bytes: fc.uint8Array() }),
      fc.record({
        kind: fc.constant('repeat' as const),
        at: fc.nat(),
        length: fc.nat(64),
        times: fc.integer({ min: 1, max: 40 }),
      }),
    );
    fc.assert(
      fc.property(requestArb, fc.array(mutation, { minLength: 1, maxLength: 2 }), (request, ms) => {
        let bytes = encode(toWire(request));
        for (const m of ms) {
          const at = bytes.length === 0 ? 0 : m.at % bytes.length;
          if (m.kind === 'flip' && bytes.length > 0) {
            bytes = Buffer.from(bytes);
            bytes[at] = m.byte;
          }
          if (m.kind === 'cut') bytes = bytes.subarray(0, at);
          if (m.kind === 'insert') {
            bytes = Buffer.concat([bytes.subarray(0, at), m.bytes, bytes.subarray(at)]);
          }
          if (m.kind === 'repeat') {
            const slice = bytes.subarray(at, at + m.length);
            bytes = Buffer.concat([bytes, ...Array<Buffer>(m.times).fill(slice)]);
          }
        }
        const decoded = timedDecode(bytes);
        if (decoded.ok) expectWithinBounds(decoded.check);
        else expect(decoded.error).toBeInstanceOf(InvalidRequestError);
      }),
      { numRuns: 3_000 },
    );
  });

  it('answers adversarial wire shapes quickly: deep groups, huge lengths, 1 MB of noise', () => {
    const cases = [
      Buffer.alloc(200_000, 0x4b), // field 9 start-group, nested 200,000 deep
      Buffer.from([0x0a, 0xff, 0xff, 0xff, 0xff, 0x0f]), // a domain claiming 4 GB
      Buffer.concat([Buffer.from([0x12, 0x80, 0x80, 0x40]), Buffer.alloc(16)]), // a 1 MB descriptor, cut
      Buffer.from(Array.from({ length: 1_000_000 }, (_, i) => (i * 7919) % 251)),
      Buffer.alloc(1_000_000, 0x12), // descriptor tags with lengths of 0x12, nested
      Buffer.alloc(10, 0xff), // a varint longer than 64 bits
    ];
    for (const bytes of cases) {
      expect(bestOfThree(() => decode(bytes))).toBeLessThan(500);
      const decoded = decode(bytes);
      expect(decoded.ok).toBe(false);
      if (!decoded.ok) expect(decoded.error).toBeInstanceOf(InvalidRequestError);
    }
  });

  it('refuses any request over a bound with a message naming that bound', () => {
    const over = fc.oneof(
      fc.record({
        bound: fc.constant('MAX_DESCRIPTORS' as const),
        extra: fc.integer({ min: 1, max: 200 }),
      }),
      fc.record({
        bound: fc.constant('MAX_ENTRIES' as const),
        extra: fc.integer({ min: 1, max: 200 }),
      }),
      fc.record({
        bound: fc.constant('MAX_ENTRY_BYTES' as const),
        extra: fc.integer({ min: 1, max: 2_000 }),
        where: fc.constantFrom('domain', 'key', 'value'),
      }),
    );
    fc.assert(
      fc.property(requestArb, over, fc.nat(), (request, violation, pick) => {
        const wire = toWire(request);
        const descriptors = wire.descriptors;
        const at = pick % descriptors.length;
        const target = descriptors[at]!;
        if (violation.bound === 'MAX_DESCRIPTORS') {
          while (descriptors.length <= LIMITS.maxDescriptors + violation.extra - 1) {
            descriptors.push(target);
          }
        } else if (violation.bound === 'MAX_ENTRIES') {
          const entries = [...target.entries];
          while (entries.length < LIMITS.maxEntries + violation.extra) entries.push(entries[0]!);
          descriptors[at] = { ...target, entries };
        } else {
          // Multi-byte characters: the bound is in bytes, not characters.
          const long = 'é'.repeat(Math.ceil((LIMITS.maxEntryBytes + violation.extra) / 2));
          if (violation.where === 'domain') wire.domain = long;
          const entries = target.entries.map((e, i) =>
            i > 0 ? e : violation.where === 'key' ? { ...e, key: long } : { ...e, value: long },
          );
          if (violation.where !== 'domain') descriptors[at] = { ...target, entries };
        }
        const decoded = timedDecode(encode(wire));
        expect(decoded.ok).toBe(false);
        if (!decoded.ok) {
          expect(decoded.error).toBeInstanceOf(InvalidRequestError);
          const limit = {
            MAX_DESCRIPTORS: LIMITS.maxDescriptors,
            MAX_ENTRIES: LIMITS.maxEntries,
            MAX_ENTRY_BYTES: LIMITS.maxEntryBytes,
          }[violation.bound];
          expect(decoded.error.message).toContain(`${violation.bound} (${limit})`);
        }
      }),
      { numRuns: 1_000 },
    );
  });

  it('never took long on any input above', () => {
    // Every property above fed timedDecode. The slowest input is timed again, so that a pause of
    // a loaded machine does not count; a decode of a few KB is microseconds, so 100 ms only
    // trips on super-linear work.
    expect(bestOfThree(() => decode(slowest.bytes))).toBeLessThan(100);
  });
});

// A plain model of the reference's precedence, written apart from match.ts: per level, the exact
// value, then the first matching wildcard in file order ('*' as a regular expression), then the
// bare key; only the last entry's rule counts, and only if it is limited or unlimited.
interface GenRule {
  key: string;
  value: string | undefined;
  kind: 'limited' | 'unlimited' | 'none';
  children: GenRule[];
}

const ruleKey = fc.constantFrom('a', 'b', 'c');
const ruleValue = fc.option(
  fc.string({ unit: fc.constantFrom('x', 'y', '*'), minLength: 1, maxLength: 4 }),
  { nil: undefined },
);
const ruleKind = fc.oneof(
  { arbitrary: fc.constant('limited' as const), weight: 4 },
  { arbitrary: fc.constant('unlimited' as const), weight: 1 },
  { arbitrary: fc.constant('none' as const), weight: 1 },
);
const level = (depth: number): fc.Arbitrary<GenRule[]> =>
  fc
    .array(
      fc.record({
        key: ruleKey,
        value: ruleValue,
        kind: ruleKind,
        children: depth > 1 ? level(depth - 1) : fc.constant<GenRule[]>([]),
      }),
      { maxLength: 5 },
    )
    // Two siblings with one key and value are a load error; keep the first.
    .map((rules) =>
      rules.filter((r, i) => rules.findIndex((o) => o.key === r.key && o.value === r.value) === i),
    );

function toYamlRule(rule: GenRule): object {
  return {
    key: rule.key,
    ...(rule.value !== undefined && { value: rule.value }),
    ...(rule.kind === 'limited' && { rate_limit: { unit: 'second', requests_per_unit: 1 } }),
    ...(rule.kind === 'unlimited' && { rate_limit: { unlimited: true } }),
    ...(rule.children.length > 0 && { descriptors: rule.children.map(toYamlRule) }),
  };
}

const wildcardRegex = (pattern: string) =>
  new RegExp(
    `^${pattern
      .split('*')
      .map((p) => p.replace(/[.*+?^${}()|[\]\\]/g, '\\$&'))
      .join('.*')}$`,
    's',
  );

/** The path (as RuleNode.path writes it) of the rule the model lands on, or undefined. */
function modelMatch(rules: GenRule[], entries: readonly Entry[]): string | undefined {
  let levelRules = rules;
  let path = 'descriptors';
  let found: { rule: GenRule; path: string } | undefined;
  for (const entry of entries) {
    const indexed = levelRules.map((rule, i) => ({ rule, path: `${path}[${i}]` }));
    const sameKey = indexed.filter(({ rule }) => rule.key === entry.key);
    found =
      sameKey.find(
        ({ rule }) =>
          rule.value !== undefined && !rule.value.includes('*') && rule.value === entry.value,
      ) ??
      sameKey.find(
        ({ rule }) => rule.value?.includes('*') && wildcardRegex(rule.value).test(entry.value),
      ) ??
      sameKey.find(({ rule }) => rule.value === undefined);
    if (found === undefined) return undefined;
    levelRules = found.rule.children;
    path = `${found.path}.descriptors`;
  }
  return found !== undefined && found.rule.kind !== 'none' ? found.path : undefined;
}

describe('rule matching', () => {
  const anyEntry = fc.record({
    key: fc.oneof(ruleKey, fc.string({ unit: 'binary', minLength: 1, maxLength: 3 })),
    value: fc.oneof(
      fc.string({ unit: fc.constantFrom('x', 'y', '*'), maxLength: 5 }),
      fc.string({ unit: 'binary', maxLength: 8 }),
    ),
  });
  /** One entry of a walk down the rules: which rule to aim at, and how close to come. */
  const step = fc.record({
    pick: fc.nat(),
    mode: fc.constantFrom('random', 'exact', 'exact', 'filled', 'filled', 'other'),
    fill: fc.string({ unit: fc.constantFrom('x', 'y', '*', 'z'), maxLength: 3 }),
    random: anyEntry,
  });
  type Step = typeof step extends fc.Arbitrary<infer T> ? T : never;

  /** Entries that mostly follow the rules' own keys and values, so walks go deep. */
  function walk(rules: GenRule[], steps: Step[]): Entry[] {
    let levelRules = rules;
    return steps.map((s) => {
      const rule = levelRules[s.pick % Math.max(1, levelRules.length)];
      if (rule === undefined || s.mode === 'random') {
        levelRules = [];
        return s.random;
      }
      levelRules = rule.children;
      const value =
        rule.value === undefined || s.mode === 'other'
          ? s.fill
          : s.mode === 'filled'
            ? rule.value.replaceAll('*', s.fill)
            : rule.value;
      return { key: rule.key, value };
    });
  }

  it('never throws, agrees with explainMatch, and lands where the model of precedence does', () => {
    const walks = fc.array(fc.array(step, { minLength: 1, maxLength: 4 }), {
      minLength: 1,
      maxLength: 10,
    });
    fc.assert(
      fc.property(level(3), walks, (rules, stepLists) => {
        const yaml = JSON.stringify({ domain: 'p', descriptors: rules.map(toYamlRule) });
        const doc = parseDocument(yaml, { version: '1.1', intAsBigInt: true });
        const domain = parseRules(doc, 'p.yaml', { defaultAlgorithm: 'fixed_window' });
        for (const steps of stepLists) {
          const list = walk(rules, steps);
          const node = matchRule(domain, list);
          expect(explainMatch(domain, list).node).toBe(node);
          expect(node?.path, JSON.stringify({ yaml, list })).toBe(modelMatch(rules, list));
        }
      }),
      { numRuns: 600 },
    );
  });

  it("matches a '*' pattern exactly as the regular expression would, in linear time", () => {
    const pattern = fc
      .string({ unit: fc.constantFrom('a', 'b', '*'), maxLength: 8 })
      .filter((p) => p.includes('*'));
    const value = fc.string({ unit: fc.constantFrom('a', 'b', '*', 'é'), maxLength: 12 });
    fc.assert(
      fc.property(pattern, value, (p, v) => {
        expect(matchesParts(v, p.split('*'))).toBe(wildcardRegex(p).test(v));
      }),
      { numRuns: 10_000 },
    );
    // The backtracking worst case for a naive matcher: many stars, a long near-miss value.
    const long = 'a'.repeat(100_000);
    const parts = 'a*'.repeat(50).concat('b').split('*');
    expect(matchesParts(long, parts)).toBe(false);
    expect(bestOfThree(() => matchesParts(long, parts))).toBeLessThan(200);
  });
});

describe('counter keys: the hash tag', () => {
  /** Characters that could break a tag, and any other code point. */
  const tricky = fc.string({
    unit: fc.oneof(
      { arbitrary: fc.constantFrom('{', '}', '\\', '(', ')', '|', ':'), weight: 3 },
      { arbitrary: fc.string({ unit: 'binary', minLength: 1, maxLength: 1 }), weight: 2 },
    ),
    maxLength: 6,
  });
  const nonEmptyTricky = tricky.filter((text) => text !== '');
  const prefix = fc.string({ maxLength: 6 }).filter((p) => !/[{}]/.test(p));
  const algorithm = fc.constantFrom<Algorithm>('fixed_window', 'sliding_window', 'token_bucket');
  const part = (text: string) => `${Buffer.byteLength(text)}:${text}`;

  it('is exactly one {...} at a fixed place, with no raw brace inside, that decodes to the tenant', () => {
    fc.assert(
      fc.property(
        prefix,
        tricky,
        fc.array(fc.record({ key: nonEmptyTricky, value: tricky }), { minLength: 1, maxLength: 4 }),
        fc.option(fc.oneof(fc.constant('tenant'), nonEmptyTricky), { nil: undefined }),
        algorithm,
        (keyPrefix, domain, list, tenantKey, alg) => {
          const key = counterKey(keyPrefix, domain, list, tenantKey, alg, 60_000);
          // Redis Cluster hashes the text between the first '{' and the first '}' after it.
          const open = key.indexOf('{');
          const close = key.indexOf('}', open + 1);
          expect(open).toBe(keyPrefix.length + 'tg:'.length);
          expect(close).toBeGreaterThan(open + 1); // never '{}', which hashes the whole key
          const tag = key.slice(open + 1, close);
          // Only the three escapes, and no raw brace: the tag cannot end early or nest.
          expect(tag).toMatch(/^(?:[^\\{}]|\\[\\()])*$/);
          const unescaped = tag.replace(/\\([\\()])/g, (_, c: string) =>
            c === '(' ? '{' : c === ')' ? '}' : '\\',
          );
          const tenant = tenantIndex(list, tenantKey);
          const entry = list[tenant]!;
          expect(unescaped).toBe(part(domain) + part(entry.key) + part(entry.value));
          expect(key.slice(close + 1).startsWith(`${tenant}|`)).toBe(true);
        },
      ),
      { numRuns: 5_000 },
    );
  });
});
