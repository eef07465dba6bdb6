// Malformed requests, as a caller sees them: each gets INVALID_ARGUMENT (never UNKNOWN) with a
// message that names the fault, whether set bounds or the defaults are exceeded, and the service
// keeps answering valid requests afterwards.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import * as grpc from '@grpc/grpc-js';
import type * as protoLoader from '@grpc/proto-loader';
import { loadProtoRoot, rlsService } from '../../src/core/protos.js';
import { type RateLimitRequestObject, type RateLimitResponseObject } from '@tollgate/client';
import { codes, d, startTollgate, type Tollgate } from '../support/tollgate.js';

const RULES = `
domain: api
descriptors:
  - key: tenant
    rate_limit: {unit: minute, requests_per_unit: 100}
`;

let bounded: Tollgate; // MAX_DESCRIPTORS=4, MAX_ENTRIES=3, MAX_ENTRY_BYTES=16
let defaults: Tollgate;
beforeAll(async () => {
  bounded = await startTollgate({
    rules: RULES,
    env: { MAX_DESCRIPTORS: '4', MAX_ENTRIES: '3', MAX_ENTRY_BYTES: '16' },
  });
  defaults = await startTollgate({ rules: RULES });
});
afterAll(async () => {
  await bounded?.stop();
  await defaults?.stop();
});

type RawRlsClient = grpc.Client & {
  ShouldRateLimit(request: object, callback: (error: grpc.ServiceError | null) => void): void;
};

async function rejection(
  call: Promise<RateLimitResponseObject>,
): Promise<{ code: number; details: string }> {
  const error = await call.then(
    (response) => expect.unreachable(`answered ${JSON.stringify(response)}`),
    (e: grpc.ServiceError) => e,
  );
  return { code: error.code, details: error.details };
}

const one = [d('tenant', 'acme')];
const cases: { case: string; request: RateLimitRequestObject; message: RegExp }[] = [
  {
    case: 'an empty domain',
    request: { domain: '', descriptors: one },
    message: /domain is empty/,
  },
  {
    case: 'no descriptors',
    request: { domain: 'api', descriptors: [] },
    message: /no descriptors/,
  },
  {
    case: 'a descriptor without entries',
    request: { domain: 'api', descriptors: [d('tenant', 'a'), { entries: [] }] },
    message: /^descriptors\[1\] has no entries/,
  },
  {
    case: 'an entry with an empty key',
    request: { domain: 'api', descriptors: [d('tenant', 'a', '', 'x')] },
    message: /^descriptors\[0\]\.entries\[1\]\.key is empty/,
  },
  {
    case: 'more descriptors than MAX_DESCRIPTORS',
    request: { domain: 'api', descriptors: Array(5).fill(one[0]) },
    message: /5 descriptors exceed MAX_DESCRIPTORS \(4\)/,
  },
  {
    case: 'more entries than MAX_ENTRIES',
    request: { domain: 'api', descriptors: [d('a', '1', 'b', '2', 'c', '3', 'e', '4')] },
    message: /^descriptors\[0\] has 4 entries, over MAX_ENTRIES \(3\)/,
  },
  {
    case: 'a key longer than MAX_ENTRY_BYTES',
    request: { domain: 'api', descriptors: [d('k'.repeat(17), 'v')] },
    message: /^descriptors\[0\]\.entries\[0\]\.key is 17 bytes, over MAX_ENTRY_BYTES \(16\)/,
  },
  {
    case: 'a value longer than MAX_ENTRY_BYTES in bytes, not characters',
    request: { domain: 'api', descriptors: [d('tenant', 'é'.repeat(9))] },
    message: /^descriptors\[0\]\.entries\[0\]\.value is 18 bytes, over MAX_ENTRY_BYTES \(16\)/,
  },
  {
    case: 'a domain longer than MAX_ENTRY_BYTES',
    request: { domain: 'd'.repeat(17), descriptors: one },
    message: /^domain is 17 bytes, over MAX_ENTRY_BYTES \(16\)/,
  },
  {
    case: 'a limit override whose unit is UNKNOWN',
    request: {
      domain: 'api',
      descriptors: [{ ...d('tenant', 'a'), limit: { requests_per_unit: 5, unit: 'UNKNOWN' } }],
    },
    message: /^descriptors\[0\]\.limit\.unit is UNKNOWN/,
  },
];

describe('malformed requests', () => {
  it.each(cases)('answers INVALID_ARGUMENT to $case', async ({ request, message }) => {
    const { code, details } = await rejection(bounded.check(request));
    expect(code).toBe(grpc.status.INVALID_ARGUMENT);
    expect(details).toMatch(message);
  });

  it('answers INVALID_ARGUMENT to 10,000 descriptors and a 1 MB value under the defaults', async () => {
    const many = { domain: 'api', descriptors: Array(10_000).fill(one[0]) };
    expect(await rejection(defaults.check(many))).toEqual({
      code: grpc.status.INVALID_ARGUMENT,
      details: '10000 descriptors exceed MAX_DESCRIPTORS (64)',
    });
    const huge = { domain: 'api', descriptors: [d('tenant', 'v'.repeat(1_000_000))] };
    expect(await rejection(defaults.check(huge))).toEqual({
      code: grpc.status.INVALID_ARGUMENT,
      details: 'descriptors[0].entries[0].value is 1000000 bytes, over MAX_ENTRY_BYTES (1024)',
    });
    const hugeDomain = { domain: 'x'.repeat(1_000_000), descriptors: one };
    expect((await rejection(defaults.check(hugeDomain))).details).toMatch(
      /^domain is 1000000 bytes/,
    );
  });

  describe('bytes that are not valid UTF-8', () => {
    // The stock client only sends strings, so this one encodes the request with bytes fields.
    const RequestType = loadProtoRoot('bytes').lookupType(
      'envoy.service.ratelimit.v3.RateLimitRequest',
    );
    const RawClient = grpc.makeGenericClientConstructor(
      {
        ShouldRateLimit: {
          ...(rlsService.ShouldRateLimit as protoLoader.MethodDefinition<object, object>),
          requestSerialize: (value: object) => Buffer.from(RequestType.encode(value).finish()),
        },
      },
      'RateLimitService',
    );
    const bad = Buffer.from([0x61, 0xff, 0xfe]);
    const ok = (text: string) => Buffer.from(text);

    it.each([
      { where: 'a key', domain: ok('api'), key: bad, value: ok('v'), message: /entries\[0\]\.key/ },
      {
        where: 'a value',
        domain: ok('api'),
        key: ok('k'),
        value: bad,
        message: /entries\[0\]\.value/,
      },
      { where: 'the domain', domain: bad, key: ok('k'), value: ok('v'), message: /^domain/ },
    ])('answers INVALID_ARGUMENT to $where', async ({ domain, key, value, message }) => {
      const raw = new RawClient(
        bounded.address,
        grpc.credentials.createInsecure(),
      ) as unknown as RawRlsClient;
      const request = { domain, descriptors: [{ entries: [{ key, value }] }] };
      try {
        const error = await new Promise<grpc.ServiceError | null>((resolve) =>
          raw.ShouldRateLimit(request, (e) => resolve(e)),
        );
        expect(error?.code).toBe(grpc.status.INVALID_ARGUMENT);
        expect(error?.details).toMatch(message);
        expect(error?.details).toMatch(/not valid UTF-8/);
      } finally {
        raw.close();
      }
    });
  });

  it('still answers a valid request on both services afterwards', async () => {
    for (const tollgate of [bounded, defaults]) {
      const response = await tollgate.check({ domain: 'api', descriptors: [d('tenant', 'acme')] });
      expect(codes(response)).toEqual(['OK', 'OK']);
      expect(response.statuses?.[0]?.limit_remaining).toBe(99);
    }
  });
});
