// Differential: refunds (is_negative_hits) against the reference's change that adds them (its
// pull request #1140, commit 5a56d24), which no release or module version carries yet. It runs
// when scripts/reference-refunds.sh has built that commit (REFERENCE_REFUNDS_SRC names a clone
// that holds it), or TOLLGATE_REFERENCE_REFUNDS_BIN names a build; otherwise it says so and skips.
import { existsSync } from 'node:fs';
import { join } from 'node:path';
import fc from 'fast-check';
import { afterAll, afterEach, describe, expect, it } from 'vitest';
import type { RateLimitRequestObject } from '@tollgate/client';
import { d } from '../support/tollgate.js';
import { comparedResponses, startPair, type Pair } from './pair.js';

const BINARY =
  process.env.TOLLGATE_REFERENCE_REFUNDS_BIN ?? join('.cache', 'reference-refunds', 'service_cmd');
const BUILT = existsSync(BINARY);
if (!BUILT) {
  console.log(
    `[reference] refunds: skipped, the reference's commit 5a56d24 is not built at ${BINARY} ` +
      '(REFERENCE_REFUNDS_SRC=<a clone holding it> bash scripts/reference-refunds.sh)',
  );
}

type Descriptor = NonNullable<RateLimitRequestObject['descriptors']>[number];

const RULES = `
domain: refunds
descriptors:
  - key: tokens
    rate_limit: { unit: hour, requests_per_unit: 10 }
  - key: user
    rate_limit: { unit: minute, requests_per_unit: 3 }
  - key: team
    shadow_mode: true
    rate_limit: { unit: minute, requests_per_unit: 2 }
  - key: internal
    rate_limit: { unlimited: true }
  - key: bulk
    rate_limit: { unit: hour, requests_per_unit: 5 }
  - key: zero
    rate_limit: { unit: minute, requests_per_unit: 0 }
`;

const spend = (hits: number | null, negative: boolean, ...entries: string[]): Descriptor => ({
  ...d(...entries),
  ...(hits === null ? {} : { hits_addend: { value: String(hits) } }),
  ...(negative ? { is_negative_hits: true } : {}),
});

const descriptor: fc.Arbitrary<Descriptor> = fc
  .record({
    entries: fc.constantFrom<string[]>(
      ['tokens', 't'],
      ['user', 'a'],
      ['user', 'b'],
      ['team', 't'],
      ['internal', 'yes'],
      ['bulk', 'b'],
      ['zero', 'z'],
      ['nothing', 'here'],
    ),
    hits: fc.option(fc.integer({ min: 0, max: 4 }), { freq: 3 }),
    negative: fc.boolean(),
    override: fc.option(fc.constantFrom(2, 5), { freq: 8 }),
  })
  .map(({ entries, hits, negative, override }) => ({
    ...spend(hits, negative, ...entries),
    ...(override === null ? {} : { limit: { requests_per_unit: override, unit: 'HOUR' } }),
  }));

const request: fc.Arbitrary<RateLimitRequestObject> = fc
  .record({
    descriptors: fc.array(descriptor, { minLength: 1, maxLength: 3 }),
    hits: fc.option(fc.integer({ min: 0, max: 4 }), { freq: 3 }),
  })
  .map(({ descriptors, hits }) => ({
    domain: 'refunds',
    descriptors,
    ...(hits === null ? {} : { hits_addend: hits }),
  }));

let pair: Pair | undefined;
afterAll(() => {
  if (BUILT) console.log(`[reference] refunds: ${comparedResponses()} responses compared`);
});
afterEach(async () => {
  await pair?.stop();
  pair = undefined;
});

/** What each side counted as given back: tollgate's labelled series, the reference's own name. */
async function negativeHits(p: Pair): Promise<{ reference: number; tollgate: number }> {
  await new Promise((resolve) => setTimeout(resolve, 400)); // the reference's flush
  const sum = (text: string) =>
    [...text.matchAll(/^\S*total_negative_hits\S* ([0-9.e+]+)$/gm)].reduce(
      (total, [, value]) => total + Number(value),
      0,
    );
  const [reference, tollgate] = await Promise.all([
    fetch(p.reference.metricsUrl).then((r) => r.text()),
    fetch(`${p.tollgate.httpUrl}/metrics`).then((r) => r.text()),
  ]);
  return { reference: sum(reference), tollgate: sum(tollgate) };
}

describe.skipIf(!BUILT)('refunds, against the reference at 5a56d24', () => {
  it("differ on purpose with the local cache: tollgate forgets a refunded key, the reference's cache still denies it", async () => {
    pair = await startPair(
      { 'refunds.yaml': RULES },
      { LOCAL_CACHE_SIZE_IN_BYTES: '1048576' },
      BINARY,
    );
    const tokens = (hits: number, negative: boolean) => ({
      domain: 'refunds',
      descriptors: [spend(hits, negative, 'tokens', 'cached')],
    });
    // 11 of 10: over, and both caches remember the key.
    await pair.check(tokens(11, false));
    await pair.check(tokens(1, false));
    // The second, answered from the caches, counted nothing: a refund of 6 leaves 5 in both.
    await pair.check(tokens(6, true));
    expect(await pair.counts()).toEqual({ reference: [5], tollgate: [5] });
    const after = await pair.send(tokens(1, false));
    expect(after.expected.overall_code).toBe('OVER_LIMIT');
    expect(after.actual).toMatchObject({ overall_code: 'OK', statuses: [{ limit_remaining: 4 }] });
  });

  it('answer the issue table alike: a refund gives back, never below nothing', async () => {
    pair = await startPair({ 'refunds.yaml': RULES }, {}, BINARY);
    const steps: [number, boolean][] = [
      [5, false],
      [3, true],
      [1, false],
      [5, true],
      [11, false],
      [4, true],
      [3, false],
      [0, true],
    ];
    for (const [hits, negative] of steps) {
      await pair.check({ domain: 'refunds', descriptors: [spend(hits, negative, 'tokens', 't')] });
    }
    expect(await pair.counts()).toMatchObject({ tollgate: (await pair.counts()).reference });
    expect(await negativeHits(pair)).toEqual({ reference: 12, tollgate: 12 });
  });

  it.each<Record<string, string>>([
    { REDIS_FUNCTIONS: 'on' },
    { REDIS_FUNCTIONS: 'off' },
    { STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT: 'true' },
  ])('answer random sequences of charges, refunds and peeks alike (%o)', async (env) => {
    pair = await startPair({ 'refunds.yaml': RULES }, env, BINARY);
    const p = pair;
    await fc.assert(
      fc.asyncProperty(fc.array(request, { minLength: 5, maxLength: 30 }), async (sequence) => {
        await p.flush();
        for (const r of sequence) await p.check(r);
        const counts = await p.counts();
        expect(counts.tollgate).toEqual(counts.reference);
      }),
      { numRuns: 60, endOnFailure: true },
    );
    const given = await negativeHits(p);
    expect(given.tollgate).toBe(given.reference);
  });
});
