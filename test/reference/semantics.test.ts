// Differential: the rule features and request fields the reference's tests exercise, sent to the
// real reference server and to tollgate under COMPAT_MODE=reference, answers compared field by
// field with the statistics (see pair.ts).
import { readFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { afterAll, afterEach, describe, expect, it } from 'vitest';
import type { RateLimitRequestObject } from '@tollgate/client';
import { d } from '../support/tollgate.js';
import { comparedResponses, startPair, type Pair } from './pair.js';

type Descriptor = NonNullable<RateLimitRequestObject['descriptors']>[number];

const fixture = (name: string) =>
  readFileSync(
    fileURLToPath(new URL(`../fixtures/rules/reference/${name}.yaml`, import.meta.url)),
    'utf8',
  ).replace(/unit: second/g, 'unit: hour');

/** Rules for the features below, one domain each. Hourly windows: see examples.test.ts. */
const FEATURES: Record<string, string> = {
  'nested.yaml': `
domain: nested
descriptors:
  - key: tenant
    descriptors:
      - key: route
        value: /login
        rate_limit: { unit: minute, requests_per_unit: 3 }
      - key: route
        rate_limit: { unit: hour, requests_per_unit: 5 }
        descriptors:
          - key: method
            value: POST
            rate_limit: { unit: day, requests_per_unit: 2 }
  - key: region
    value: eu-*
    rate_limit: { unit: minute, requests_per_unit: 4 }
  - key: region
    rate_limit: { unit: minute, requests_per_unit: 6 }
`,
  'share_threshold.yaml': fixture('share_threshold'),
  'value_to_metric.yaml': fixture('value_to_metric'),
  'unlimited_replaces.yaml': fixture('unlimited_replaces'),
  'shadow.yaml': `
domain: shadow
descriptors:
  - key: user
    shadow_mode: true
    rate_limit: { unit: minute, requests_per_unit: 2 }
  - key: plan
    rate_limit: { unit: minute, requests_per_unit: 3 }
  - key: zero
    rate_limit: { unit: minute, requests_per_unit: 0 }
  - key: detailed
    detailed_metric: true
    rate_limit: { unit: minute, requests_per_unit: 4 }
`,
};

let pair: Pair | undefined;
afterAll(() => {
  console.log(`[reference] semantics: ${comparedResponses()} responses compared`);
});
afterEach(async () => {
  await pair?.stop();
  pair = undefined;
});

async function send(
  p: Pair,
  times: number,
  domain: string,
  descriptors: Descriptor[],
  hits?: number,
): Promise<void> {
  for (let i = 0; i < times; i++) {
    await p.check({ domain, descriptors, ...(hits === undefined ? {} : { hits_addend: hits }) });
  }
}

/** Every request shape of the features above, one after another. */
async function exercise(p: Pair): Promise<void> {
  await send(p, 5, 'nested', [d('tenant', 'a', 'route', '/login')]);
  await send(p, 4, 'nested', [
    d('tenant', 'a', 'route', '/x'),
    d('tenant', 'b', 'route', '/login'),
  ]);
  await send(p, 3, 'nested', [d('tenant', 'a', 'route', '/x', 'method', 'POST')]);
  await send(p, 6, 'nested', [d('region', 'eu-west'), d('region', 'us-east')]);
  await send(p, 2, 'nested', [d('tenant', 'a'), d('region', 'eu-')], 2);
  await send(p, 6, 'share_threshold', [d('path', 'files/a'), d('path', 'files/b')]);
  await send(p, 6, 'share_threshold', [d('path', 'docs/a'), d('path', 'docs/b')], 2);
  await send(p, 7, 'value_to_metric', [d('route', '/a', 'method', 'GET')]);
  await send(p, 3, 'value_to_metric', [d('route', '/b', 'method', 'GET')], 3);
  await send(p, 3, 'unlimited_replaces', [d('user', 'u1')]);
  await send(p, 3, 'unlimited_replaces', [d('user', 'u1'), d('internal_route', 'x')]);
  await send(p, 4, 'shadow', [d('user', 'u'), d('plan', 'p')]);
  await send(p, 2, 'shadow', [d('user', 'u')]);
  await send(p, 2, 'shadow', [d('zero', 'z')]);
  await send(p, 2, 'shadow', [d('zero', 'z'), d('plan', 'q')], 0);
  await send(p, 5, 'shadow', [d('detailed', 'd1'), d('detailed', 'd2')]);
  // The same descriptor twice in one request: two increments of one counter.
  await send(p, 3, 'shadow', [d('plan', 'twice'), d('plan', 'twice')]);
  // A descriptor without entries is OK with no limit; the others are decided.
  await send(p, 4, 'shadow', [{ entries: [] }, d('plan', 'empty')]);
  // ... and with a limit override, it is counted under the domain alone.
  await send(p, 3, 'shadow', [
    { entries: [], limit: { requests_per_unit: 2, unit: 'HOUR' } },
    { entries: [] },
  ]);
  // Per-descriptor hits_addend, including 0, beside the request's.
  await send(p, 3, 'shadow', [
    { ...d('plan', 'h'), hits_addend: { value: '0' } },
    { ...d('detailed', 'h'), hits_addend: { value: '2' } },
  ]);
  await send(p, 2, 'shadow', [{ ...d('plan', 'h2'), hits_addend: { value: '5' } }], 1);
  // Limit overrides: always enforced, counted on the descriptor's own entries.
  const override = (n: number, unit: string, ...kv: string[]): Descriptor => ({
    ...d(...kv),
    limit: { requests_per_unit: n, unit },
  });
  await send(p, 4, 'shadow', [override(2, 'HOUR', 'user', 'o')]);
  await send(p, 3, 'shadow', [override(3, 'DAY', 'anything', 'x', 'deeper', 'y')]);
  await send(p, 2, 'unknown_domain', [d('any', 'thing')]);
  // A cost past the limit, alone and beside a counter that fits: what it leaves counted shows in
  // the answers after it.
  await send(p, 1, 'shadow', [d('plan', 'big')], 1000);
  await send(p, 3, 'shadow', [d('plan', 'big')]);
  await send(p, 1, 'shadow', [
    d('plan', 'big2'),
    { ...d('detailed', 'big2'), hits_addend: { value: '1000' } },
  ]);
  await send(p, 3, 'shadow', [d('plan', 'big2'), d('detailed', 'big2')]);
}

describe('rule features, against the reference', () => {
  it('answers and counts alike', async () => {
    pair = await startPair(FEATURES);
    await exercise(pair);
    const { reference, tollgate } = await pair.stats();
    expect(tollgate).toEqual(reference);
  });

  it('answers alike with global SHADOW_MODE, headers and dynamic metadata', async () => {
    pair = await startPair(FEATURES, {
      SHADOW_MODE: 'true',
      LIMIT_RESPONSE_HEADERS_ENABLED: 'true',
      RESPONSE_DYNAMIC_METADATA: 'true',
    });
    await exercise(pair);
    const { reference, tollgate } = await pair.stats();
    expect(tollgate).toEqual(reference);
  });

  it('answers alike with STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT', async () => {
    pair = await startPair(FEATURES, { STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT: 'true' });
    await exercise(pair);
    const { reference, tollgate } = await pair.stats();
    expect(tollgate).toEqual(reference);
  });

  it('answers alike with the local cache, with and without STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT', async () => {
    for (const stop of ['false', 'true']) {
      pair = await startPair(FEATURES, {
        LOCAL_CACHE_SIZE_IN_BYTES: '1048576',
        STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT: stop,
      });
      await exercise(pair);
      const { reference, tollgate } = await pair.stats();
      expect(tollgate, `STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT=${stop}`).toEqual(reference);
      // The cache's own gauges, the mean access time (Unix seconds) within the run's length.
      const gauges = await pair.localCache();
      const { averageAccessTime: theirTime, ...theirs } = gauges.reference;
      const { averageAccessTime: ourTime, ...ours } = gauges.tollgate;
      expect(ours, `local cache gauges, STOP=${stop}`).toEqual(theirs);
      expect(Object.keys(theirs).length).toBe(7);
      expect(Math.abs((ourTime ?? 0) - (theirTime ?? 0))).toBeLessThanOrEqual(5);
      await pair.stop();
      pair = undefined;
    }
  });

  it('leaves the same counts in Redis after a cost past the limit', async () => {
    const settings: Record<string, string>[] = [
      {},
      { STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT: 'true' },
      { LOCAL_CACHE_SIZE_IN_BYTES: '1048576' },
      { LOCAL_CACHE_SIZE_IN_BYTES: '1048576', STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT: 'true' },
    ];
    for (const env of settings) {
      pair = await startPair(FEATURES, env);
      const what = JSON.stringify(env);
      await pair.check({ domain: 'shadow', descriptors: [d('plan', 'big')], hits_addend: 1000 });
      expect(await pair.counts(), what).toEqual({ reference: [1000], tollgate: [1000] });
      await pair.check({ domain: 'shadow', descriptors: [d('plan', 'big')] });
      await pair.check({
        domain: 'shadow',
        descriptors: [d('plan', 'fits'), { ...d('plan', 'past'), hits_addend: { value: '1000' } }],
      });
      const { reference, tollgate } = await pair.counts();
      expect(tollgate, what).toEqual(reference);
      await pair.stop();
      pair = undefined;
    }
  });

  it('with the local cache, answers a plain check from a limit override remembered over, alike', async () => {
    // The cache's key is the counter's, without its limit: an override of 1 a minute that went
    // over makes plain checks of the same counter (the rule allows 3 a minute) over too, in both.
    pair = await startPair(FEATURES, { LOCAL_CACHE_SIZE_IN_BYTES: '1048576' });
    const override = { ...d('plan', 'o'), limit: { requests_per_unit: 1, unit: 'MINUTE' } };
    await pair.check({ domain: 'shadow', descriptors: [override] });
    const over = await pair.check({ domain: 'shadow', descriptors: [override] });
    expect(over.overall_code).toBe('OVER_LIMIT');
    const plain = await pair.check({ domain: 'shadow', descriptors: [d('plan', 'o')] });
    expect(plain.overall_code).toBe('OVER_LIMIT');
    const { reference, tollgate } = await pair.counts();
    expect(tollgate).toEqual(reference);
    expect(reference).toEqual([2]);
  });
});
