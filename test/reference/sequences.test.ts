// Differential: random request sequences (fast-check) and rules reloads, sent to the real
// reference server and to tollgate under COMPAT_MODE=reference, answers compared field by field
// with the statistics (see pair.ts).
import fc from 'fast-check';
import { afterAll, afterEach, describe, expect, it } from 'vitest';
import type { RateLimitClient, RateLimitRequestObject } from '@tollgate/client';
import { callCheck, d, eventually } from '../support/tollgate.js';
import { comparedResponses, startPair, type Pair } from './pair.js';

type Descriptor = NonNullable<RateLimitRequestObject['descriptors']>[number];

/**
 * One rules file with a little of everything the pinned reference shares with main (no quota
 * mode, no rule metadata, trailing wildcards only). Small limits, so that sequences cross them;
 * minute and hour windows (see pair.ts on window edges).
 */
const RULES = `
domain: random
descriptors:
  - key: user
    rate_limit: { unit: minute, requests_per_unit: 3 }
  - key: user
    value: vip
    rate_limit: { unit: hour, requests_per_unit: 6 }
  - key: team
    shadow_mode: true
    rate_limit: { unit: minute, requests_per_unit: 2 }
  - key: path
    value: api/*
    share_threshold: true
    rate_limit: { unit: minute, requests_per_unit: 4 }
  - key: path
    value: web/*
    detailed_metric: true
    rate_limit: { unit: minute, requests_per_unit: 2 }
  - key: tenant
    value_to_metric: true
    descriptors:
      - key: route
        rate_limit: { name: per_route, unit: minute, requests_per_unit: 4 }
  - key: internal
    rate_limit:
      unlimited: true
      replaces: [{ name: per_route }]
  - key: bulk
    rate_limit:
      name: bulk
      unit: hour
      requests_per_unit: 5
  - key: zero
    rate_limit: { unit: minute, requests_per_unit: 0 }
`;

const descriptor: fc.Arbitrary<Descriptor> = fc
  .record({
    entries: fc.constantFrom<string[]>(
      ['user', 'a'],
      ['user', 'b'],
      ['user', 'vip'],
      ['team', 't'],
      ['path', 'api/x'],
      ['path', 'api/y'],
      ['path', 'web/x'],
      ['path', 'web/y'],
      ['tenant', 'acme', 'route', '/r1'],
      ['tenant', 'acme', 'route', '/r2'],
      ['tenant', 'beta', 'route', '/r1'],
      ['internal', 'yes'],
      ['bulk', 'b'],
      ['zero', 'z'],
      ['nothing', 'here'],
      [],
    ),
    hits: fc.option(fc.integer({ min: 0, max: 3 }), { freq: 4 }),
    override: fc.option(fc.constantFrom(1, 2, 5), { freq: 8 }),
  })
  .map(({ entries, hits, override }) => ({
    ...d(...entries),
    ...(hits === null ? {} : { hits_addend: { value: String(hits) } }),
    ...(override === null || entries.length === 0
      ? {}
      : { limit: { requests_per_unit: override, unit: 'HOUR' } }),
  }));

const request: fc.Arbitrary<RateLimitRequestObject> = fc
  .record({
    descriptors: fc.array(descriptor, { minLength: 1, maxLength: 4 }),
    hits: fc.option(fc.integer({ min: 0, max: 3 }), { freq: 3 }),
  })
  .map(({ descriptors, hits }) => ({
    domain: 'random',
    descriptors,
    ...(hits === null ? {} : { hits_addend: hits }),
  }));

let pair: Pair | undefined;
afterAll(() => {
  console.log(`[reference] sequences: ${comparedResponses()} responses compared`);
});
afterEach(async () => {
  await pair?.stop();
  pair = undefined;
});

/**
 * Runs `runs` random sequences on the pair, each from empty counters; then compares statistics.
 * `sameKeys` (COMPAT_KEYS=reference): after each sequence, both Redis hold the same keys, each
 * with the same count.
 */
async function randomSequences(p: Pair, runs: number, sameKeys = false): Promise<void> {
  await fc.assert(
    fc.asyncProperty(fc.array(request, { minLength: 5, maxLength: 30 }), async (sequence) => {
      await p.flush();
      for (const r of sequence) await p.check(r);
      if (!sameKeys) return;
      const { reference, tollgate } = await p.keys();
      expect(tollgate).toEqual(reference);
    }),
    // A failure is reported as found: shrinking would replay hundreds of sequences.
    { numRuns: runs, endOnFailure: true },
  );
  const { reference, tollgate } = await p.stats();
  expect(tollgate).toEqual(reference);
}

describe('random sequences, against the reference', () => {
  // Checks reach Redis as functions in every pair (startPair), and here also as scripts.
  it.each(['on', 'off'])('answer alike (REDIS_FUNCTIONS=%s)', async (functions) => {
    pair = await startPair({ 'random.yaml': RULES }, { REDIS_FUNCTIONS: functions });
    await randomSequences(pair, 100);
  });

  it('answer alike with STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT', async () => {
    pair = await startPair(
      { 'random.yaml': RULES },
      { STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT: 'true' },
    );
    await randomSequences(pair, 100);
  });

  it('answer alike with the local cache and STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT', async () => {
    pair = await startPair(
      { 'random.yaml': RULES },
      { LOCAL_CACHE_SIZE_IN_BYTES: '1048576', STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT: 'true' },
    );
    await randomSequences(pair, 60);
  });

  it('answer alike with headers, dynamic metadata and global SHADOW_MODE', async () => {
    pair = await startPair(
      { 'random.yaml': RULES },
      {
        LIMIT_RESPONSE_HEADERS_ENABLED: 'true',
        RESPONSE_DYNAMIC_METADATA: 'true',
        SHADOW_MODE: 'true',
      },
    );
    await randomSequences(pair, 60);
  });
});

describe("random sequences on the reference's own keys (COMPAT_KEYS=reference)", () => {
  // The same keys, counts and expiries as the reference's: its stop mode, its local cache and the
  // callers' limit overrides included.
  it.each([
    ['default counting', {}],
    [
      'STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT',
      { STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT: 'true' },
    ],
    [
      'the local cache and STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT',
      { LOCAL_CACHE_SIZE_IN_BYTES: '1048576', STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT: 'true' },
    ],
  ])('answer alike and write alike, key for key (%s)', async (_name, env) => {
    pair = await startPair({ 'random.yaml': RULES }, { COMPAT_KEYS: 'reference', ...env });
    await randomSequences(pair, 60, true);
  });
});

/** Polls one service with a check that consumes nothing until `marker` reports `limit`. */
async function untilMarker(client: RateLimitClient, limit: number): Promise<void> {
  await eventually(async () => {
    const response = await callCheck(client, {
      domain: 'reload',
      descriptors: [{ ...d('marker', 'm'), hits_addend: { value: '0' } }],
    });
    return response.statuses?.[0]?.current_limit?.requests_per_unit === limit;
  }, 30_000);
}

describe('reloads, against the reference', () => {
  it('apply the new limits to the counts so far, alike', async () => {
    const rules = (marker: number, user: number, unit: string) => `
domain: reload
descriptors:
  - key: marker
    rate_limit: { unit: hour, requests_per_unit: ${marker} }
  - key: user
    rate_limit: { unit: ${unit}, requests_per_unit: ${user} }
`;
    pair = await startPair({ 'reload.yaml': rules(1, 5, 'minute') });
    const user: Descriptor[] = [d('user', 'u')];
    for (let i = 0; i < 4; i++) await pair.check({ domain: 'reload', descriptors: user });
    // A lower limit on the same window: the count so far already passes it.
    pair.writeRules('reload.yaml', rules(2, 3, 'minute'));
    await Promise.all([
      untilMarker(pair.reference.client, 2),
      untilMarker(pair.tollgate.client, 2),
    ]);
    for (let i = 0; i < 2; i++) await pair.check({ domain: 'reload', descriptors: user });
    // Another unit is another window, so another count.
    pair.writeRules('reload.yaml', rules(3, 3, 'hour'));
    await Promise.all([
      untilMarker(pair.reference.client, 3),
      untilMarker(pair.tollgate.client, 3),
    ]);
    for (let i = 0; i < 4; i++) await pair.check({ domain: 'reload', descriptors: user });
    // A rule removed: no limit.
    pair.writeRules('reload.yaml', rules(4, 3, 'hour').replace(/ {2}- key: user[^]*$/, ''));
    await Promise.all([
      untilMarker(pair.reference.client, 4),
      untilMarker(pair.tollgate.client, 4),
    ]);
    await pair.check({ domain: 'reload', descriptors: user });
    const { reference, tollgate } = await pair.stats();
    expect(tollgate).toEqual(reference);
  });
});
