// Differential: the reference README's examples 1-9, sent to the real reference server and to
// tollgate under COMPAT_MODE=reference, answers compared field by field (see pair.ts).
import { readFileSync, readdirSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { RateLimitRequestObject } from '@tollgate/client';
import { d } from '../support/tollgate.js';
import { comparedResponses, expectAlike, startPair, type Exchange, type Pair } from './pair.js';

type Descriptor = NonNullable<RateLimitRequestObject['descriptors']>[number];

const FIXTURES = fileURLToPath(new URL('../fixtures/rules/reference/', import.meta.url));

/**
 * The fixtures with per-second windows made hourly: a second turns over within a sequence on a
 * loaded machine, and the two services would then compare different windows.
 */
function examples(): Record<string, string> {
  const files: Record<string, string> = {};
  for (const name of readdirSync(FIXTURES).filter((n) => /^example\d\.yaml$/.test(n))) {
    files[name] = readFileSync(FIXTURES + name, 'utf8').replace(/unit: second/g, 'unit: hour');
  }
  // Examples 1 and 3 as they are, per second, under domains of their own.
  for (const example of ['example1', 'example3']) {
    files[`${example}-per-second.yaml`] = readFileSync(
      `${FIXTURES}${example}.yaml`,
      'utf8',
    ).replace(/^domain: (\S+)$/m, 'domain: $1_per_second');
  }
  return files;
}

let pair: Pair;
beforeAll(async () => {
  pair = await startPair(examples());
});
afterAll(async () => {
  console.log(`[reference] examples: ${comparedResponses()} responses compared`);
  await pair?.stop();
});

async function repeat(times: number, domain: string, descriptors: Descriptor[], hits?: number) {
  for (let i = 0; i < times; i++) {
    await pair.check({ domain, descriptors, ...(hits === undefined ? {} : { hits_addend: hits }) });
  }
}

describe('the reference README examples, against the reference', () => {
  it('1: sibling values, each with its own budget', async () => {
    await repeat(3, 'mongo_cps', [d('database', 'users')], 200);
    await repeat(2, 'mongo_cps', [d('database', 'default'), d('database', 'users')], 100);
    await repeat(2, 'mongo_cps', [d('database', 'other')]);
  });

  it('2: nested and flat rules on one number', async () => {
    const marketing = [d('message_type', 'marketing', 'to_number', '2061234567')];
    await repeat(7, 'messaging', [...marketing, d('to_number', '2061234567')]);
    await repeat(2, 'messaging', [d('to_number', '2061111111')], 60);
  });

  it('3: a default per address, and one address limited to 0', async () => {
    await repeat(12, 'edge_proxy_per_ip', [d('remote_address', '10.0.0.1')]);
    await repeat(3, 'edge_proxy_per_ip', [d('remote_address', '50.0.0.5')]);
    await repeat(2, 'edge_proxy_per_ip', [d('remote_address', '50.0.0.5')], 0);
    await repeat(2, 'edge_proxy_per_ip', [
      d('remote_address', '50.0.0.5'),
      d('remote_address', '10.0.0.2'),
    ]);
  });

  it('4: a limit only at the depth where it is written', async () => {
    await repeat(2, 'example4', [d('key', 'value', 'subkey', 'a')], 150);
    await repeat(2, 'example4', [d('key', 'value')]);
    await repeat(2, 'example4', [d('key', 'value', 'subkey', 'a', 'extra', 'x')]);
  });

  it('5: unlimited beside a limited rule', async () => {
    await repeat(3, 'internal', [d('ldap', 'x'), d('azure', 'y')], 40);
  });

  it('6: shadow mode for one user', async () => {
    await repeat(12, 'example6', [d('service', 's', 'user', 'user-a')]);
    await repeat(22, 'example6', [d('service', 's', 'user', 'user-b')]);
    await repeat(3, 'example6', [
      d('service', 's', 'user', 'user-a'),
      d('service', 's', 'user', 'user-b'),
    ]);
  });

  it('7: a replaced limit', async () => {
    const both = [
      d('key_1', 'value_1', 'user', 'bkthomps'),
      d('key_2', 'value_2', 'user', 'bkthomps'),
    ];
    await repeat(12, 'example7', both);
    await repeat(7, 'example7', [d('key_1', 'value_1', 'user', 'bkthomps')]);
  });

  it('8: detailed metrics on a bare key', async () => {
    await repeat(12, 'example8', [d('key1', 'value2')]);
    await repeat(3, 'example8', [d('key1', 'value1')], 8);
    await repeat(2, 'example8', [d('key1', 'value3'), d('key1', 'value1')]);
  });

  it('9: a trailing wildcard', async () => {
    await repeat(22, 'example9', [d('key1', 'value1')]);
    await repeat(2, 'example9', [d('key1', 'valueX'), d('key1', 'nomatch')], 15);
  });

  it('1 and 3 per second, within one second', async () => {
    const sequence: RateLimitRequestObject[] = [
      ...Array.from({ length: 12 }, () => ({
        domain: 'edge_proxy_per_ip_per_second',
        descriptors: [d('remote_address', '10.0.0.9')],
      })),
      { domain: 'edge_proxy_per_ip_per_second', descriptors: [d('remote_address', '50.0.0.5')] },
      { domain: 'mongo_cps_per_second', descriptors: [d('database', 'users')], hits_addend: 499 },
      { domain: 'mongo_cps_per_second', descriptors: [d('database', 'users')], hits_addend: 2 },
    ];
    // Sent at the start of a second, and compared only when every exchange fell within it: a
    // loaded machine may need another try.
    for (let attempt = 1; ; attempt++) {
      await new Promise((resolve) => setTimeout(resolve, 1_000 - (Date.now() % 1_000) + 5));
      const exchanges: Exchange[] = [];
      for (const request of sequence) exchanges.push(await pair.send(request));
      const last = exchanges[exchanges.length - 1] as Exchange;
      const sameSecond =
        Math.floor((exchanges[0] as Exchange).started / 1_000) ===
        Math.floor((last.started + last.gapMs) / 1_000);
      if (sameSecond || attempt === 5) {
        expect(sameSecond, 'the sequence fits in one second').toBe(true);
        exchanges.forEach(expectAlike);
        break;
      }
    }
  });

  it('counts the same statistics', async () => {
    const { reference, tollgate } = await pair.stats();
    expect(tollgate).toEqual(reference);
  });
});
