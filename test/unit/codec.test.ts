import { describe, it, expect } from 'vitest';
import protobuf from 'protobufjs';
import type { Decision } from '../../src/core/check.js';
import {
  createRequestDecoder,
  encodeResponse,
  type DecodedRequest,
} from '../../src/servers/grpc/codec.js';
import { loadProtoRoot } from '../../src/core/protos.js';

const strings = loadProtoRoot('strings');
const bytesRoot = loadProtoRoot('bytes');
const RequestType = strings.lookupType('envoy.service.ratelimit.v3.RateLimitRequest');
const BytesRequestType = bytesRoot.lookupType('envoy.service.ratelimit.v3.RateLimitRequest');
const ResponseType = strings.lookupType('envoy.service.ratelimit.v3.RateLimitResponse');
const decode = createRequestDecoder({ maxDescriptors: 64, maxEntries: 16, maxEntryBytes: 1024 });

const encode = (request: object): Buffer =>
  Buffer.from(RequestType.encode(RequestType.fromObject(request)).finish());
const entry = (key: string, value: string) => ({ key, value });
const descriptors = (n: number, entries = [entry('k', 'v')]) =>
  Array.from({ length: n }, () => ({ entries }));

function check(request: object | Buffer) {
  const decoded = decode(Buffer.isBuffer(request) ? request : encode(request));
  if (!decoded.ok) throw decoded.error;
  return decoded.check;
}
function rejection(request: object | Buffer): string {
  const decoded: DecodedRequest = decode(Buffer.isBuffer(request) ? request : encode(request));
  expect(decoded.ok).toBe(false);
  return decoded.ok ? '' : `${decoded.error.name}: ${decoded.error.message}`;
}

/** A request of domain 'api' and one descriptor, entry key 'k', written by hand; `more` adds fields to it. */
function oneDescriptor(more: (writer: protobuf.Writer) => void): Buffer {
  const writer = protobuf.Writer.create();
  writer.uint32((1 << 3) | 2).string('api');
  writer.uint32((2 << 3) | 2).fork();
  writer
    .uint32((1 << 3) | 2)
    .fork()
    .uint32((1 << 3) | 2)
    .string('k')
    .ldelim();
  more(writer);
  writer.ldelim();
  return Buffer.from(writer.finish());
}

describe('decoding a request', () => {
  it('produces the check with entries, a limit override and costs', () => {
    const request = {
      domain: 'api',
      hits_addend: 3,
      descriptors: [
        { entries: [entry('tenant', 'acme'), entry('route', '/orders')] },
        { entries: [entry('k', '')], limit: { requests_per_unit: 5, unit: 'MINUTE' } },
        { entries: [entry('ü', 'ß')], hits_addend: { value: 7 } },
      ],
    };
    expect(check(request)).toEqual({
      domain: 'api',
      hitsAddend: 3,
      descriptors: [
        { entries: [entry('tenant', 'acme'), entry('route', '/orders')] },
        { entries: [entry('k', '')], limit: { requestsPerUnit: 5, unit: 'minute' } },
        { entries: [entry('ü', 'ß')], hitsAddend: 7n },
      ],
    });
  });

  it('keeps hits_addend exact at the 32-bit and 64-bit maxima, 0 as 0n and absence as undefined', () => {
    const result = check({
      domain: 'api',
      hits_addend: 4294967295,
      descriptors: [
        { entries: [entry('a', '1')], hits_addend: { value: '18446744073709551615' } },
        { entries: [entry('a', '2')], hits_addend: { value: '9007199254740993' } },
        { entries: [entry('a', '3')], hits_addend: { value: 0 } },
        { entries: [entry('a', '4')] },
      ],
    });
    expect(result.hitsAddend).toBe(4294967295);
    expect(result.descriptors.map((d) => d.hitsAddend)).toEqual([
      18446744073709551615n,
      9007199254740993n,
      0n,
      undefined,
    ]);
    expect(check({ domain: 'api', descriptors: descriptors(1) }).hitsAddend).toBe(0);

    // An explicit 0 as encoders send it: a present wrapper with its value left out.
    const zero = oneDescriptor((w) =>
      w
        .uint32((3 << 3) | 2)
        .fork()
        .ldelim(),
    );
    expect(check(zero).descriptors[0]?.hitsAddend).toBe(0n);
  });

  it('reads is_negative_hits (field 4), true for any non-zero varint, and refuses it in another wire type', () => {
    const result = check({
      domain: 'api',
      descriptors: [
        { entries: [entry('a', '1')], hits_addend: { value: 5 }, is_negative_hits: true },
        { entries: [entry('a', '2')], is_negative_hits: false },
        { entries: [entry('a', '3')] },
      ],
    });
    expect(result.descriptors.map((d) => d.isNegativeHits)).toEqual([true, undefined, undefined]);
    expect(result.descriptors[0]?.hitsAddend).toBe(5n);

    expect(
      check(oneDescriptor((w) => w.uint32(4 << 3).uint32(7))).descriptors[0]?.isNegativeHits,
    ).toBe(true);
    expect(rejection(oneDescriptor((w) => w.uint32((4 << 3) | 2).bytes(Buffer.from('x'))))).toMatch(
      /^InvalidRequestError: malformed request: invalid tag 34/,
    );
  });

  it('maps every override unit', () => {
    const units = ['SECOND', 'MINUTE', 'HOUR', 'DAY', 'MONTH', 'YEAR'];
    const result = check({
      domain: 'api',
      descriptors: units.map((unit) => ({
        entries: [entry('k', unit)],
        limit: { requests_per_unit: 1, unit },
      })),
    });
    expect(result.descriptors.map((d) => d.limit?.unit)).toEqual([
      'second',
      'minute',
      'hour',
      'day',
      'month',
      'year',
    ]);
  });

  it('names each fault of a malformed request', () => {
    const ok = [entry('k', 'v')];
    expect(rejection({ domain: '', descriptors: descriptors(1) })).toBe(
      'InvalidRequestError: domain is empty',
    );
    // proto3 encoders such as Envoy's leave empty strings out, so absence must read as empty.
    const absent = (field: number) => {
      const writer = protobuf.Writer.create();
      if (field !== 1) writer.uint32((1 << 3) | 2).string('api');
      writer.uint32((2 << 3) | 2).fork();
      writer.uint32((1 << 3) | 2).fork();
      if (field !== 2) writer.uint32((1 << 3) | 2).string('k');
      return Buffer.from(writer.ldelim().ldelim().finish());
    };
    expect(rejection(absent(1))).toMatch(/: domain is empty$/);
    expect(rejection(absent(2))).toMatch(/: descriptors\[0\]\.entries\[0\]\.key is empty$/);
    expect(check(absent(0)).descriptors).toEqual([{ entries: [entry('k', '')] }]);
    expect(rejection(Buffer.alloc(0))).toMatch(/: domain is empty$/);
    expect(rejection({ domain: 'api' })).toMatch(/: no descriptors$/);
    expect(
      rejection({
        domain: 'api',
        descriptors: [{ entries: ok }, { entries: ok }, { entries: [] }],
      }),
    ).toMatch(/: descriptors\[2\] has no entries$/);
    expect(
      rejection({ domain: 'api', descriptors: [{ entries: [...ok, entry('', 'v')] }] }),
    ).toMatch(/: descriptors\[0\]\.entries\[1\]\.key is empty$/);
    const overridden = descriptors(4);
    overridden[3] = { entries: ok, limit: { requests_per_unit: 1, unit: 'UNKNOWN' } } as never;
    expect(rejection({ domain: 'api', descriptors: overridden })).toMatch(
      /: descriptors\[3\]\.limit\.unit is UNKNOWN$/,
    );
  });

  it('rejects key, value or domain bytes that are not valid UTF-8', () => {
    const bad = Buffer.from([0x61, 0xff, 0xfe]);
    const bytes = (domain: Buffer, key: Buffer, value: Buffer) =>
      Buffer.from(
        BytesRequestType.encode({ domain, descriptors: [{ entries: [{ key, value }] }] }).finish(),
      );
    const good = Buffer.from('ok');
    expect(rejection(bytes(good, good, bad))).toMatch(
      /: descriptors\[0\]\.entries\[0\]\.value is not valid UTF-8$/,
    );
    expect(rejection(bytes(good, bad, good))).toMatch(/entries\[0\]\.key is not valid UTF-8$/);
    expect(rejection(bytes(bad, good, good))).toMatch(/: domain is not valid UTF-8$/);

    // The same request built field by field, as a client that sends raw bytes would.
    const writer = protobuf.Writer.create();
    writer.uint32((1 << 3) | 2).string('api');
    writer.uint32((2 << 3) | 2).fork();
    writer.uint32((1 << 3) | 2).fork();
    writer.uint32((1 << 3) | 2).string('k');
    writer.uint32((2 << 3) | 2).bytes(Buffer.from([0xc3, 0x28]));
    writer.ldelim().ldelim();
    expect(rejection(Buffer.from(writer.finish()))).toMatch(/value is not valid UTF-8$/);
  });

  it('accepts requests at the bounds and rejects them one over', () => {
    const at = {
      domain: 'd'.repeat(1024),
      descriptors: [
        ...descriptors(63),
        { entries: Array.from({ length: 16 }, () => entry('k'.repeat(1024), 'v'.repeat(1024))) },
      ],
    };
    expect(check(at).descriptors).toHaveLength(64);
    expect(rejection({ domain: 'api', descriptors: descriptors(65) })).toMatch(
      /: 65 descriptors exceed MAX_DESCRIPTORS \(64\)$/,
    );
    expect(
      rejection({ domain: 'api', descriptors: descriptors(1, Array(17).fill(entry('k', 'v'))) }),
    ).toMatch(/: descriptors\[0\] has 17 entries, over MAX_ENTRIES \(16\)$/);
    expect(
      rejection({ domain: 'api', descriptors: descriptors(1, [entry('k', 'v'.repeat(2000))]) }),
    ).toMatch(
      /: descriptors\[0\]\.entries\[0\]\.value is 2000 bytes, over MAX_ENTRY_BYTES \(1024\)$/,
    );
    expect(
      rejection({ domain: 'api', descriptors: descriptors(1, [entry('k'.repeat(1025), 'v')]) }),
    ).toMatch(/entries\[0\]\.key is 1025 bytes, over MAX_ENTRY_BYTES \(1024\)$/);
    expect(rejection({ domain: 'd'.repeat(2000), descriptors: descriptors(1) })).toMatch(
      /: domain is 2000 bytes, over MAX_ENTRY_BYTES \(1024\)$/,
    );
  });

  it('rejects 100,000 descriptors (1 MB) at a fraction of the cost of decoding them', () => {
    const request = encode({ domain: 'api', descriptors: descriptors(100_000) });
    // The fastest of five runs, after a warm-up: a pause of a loaded machine (or of the
    // collector) lengthens one run, not all five.
    const time = (run: () => unknown) => {
      run();
      let fastest = Number.POSITIVE_INFINITY;
      for (let i = 0; i < 5; i++) {
        const started = performance.now();
        run();
        fastest = Math.min(fastest, performance.now() - started);
      }
      return fastest;
    };
    expect(rejection(request)).toMatch(/: 100000 descriptors exceed MAX_DESCRIPTORS \(64\)$/);
    expect(time(() => decode(request))).toBeLessThan(
      time(() => BytesRequestType.decode(request)) / 3,
    );
  });

  it('answers malformed protobuf as an invalid request', () => {
    const truncated = encode({ domain: 'api', descriptors: descriptors(2) }).subarray(0, 9);
    expect(rejection(truncated)).toMatch(/^InvalidRequestError: malformed request: /);
    expect(rejection(Buffer.from([0x0f]))).toMatch(/malformed request: /); // wire type 7
    expect(rejection(Buffer.from([0x10, 0x01]))).toMatch(/malformed request: invalid tag/); // domain as varint
    expect(rejection(Buffer.from([0x12, 0x02, 0x08, 0x01]))).toMatch(/malformed request: /);
  });

  it('refuses a descriptor or a part of one that runs past the bytes', () => {
    // domain "a", then a descriptor that claims 9 bytes of which 4 are there.
    const cut = Buffer.from([0x0a, 0x01, 0x61, 0x12, 0x09, 0x0a, 0x02, 0x0a, 0x00]);
    expect(rejection(cut)).toMatch(/malformed request: index out of range/);
    // A descriptor of 4 bytes whose one entry claims 6.
    const overrun = Buffer.from([0x0a, 0x01, 0x61, 0x12, 0x04, 0x0a, 0x06, 0x0a, 0x00]);
    expect(rejection(overrun)).toMatch(/malformed request: a descriptor overruns its length/);
  });

  it('reports the counts before a fault inside an entry, whatever comes first on the wire', () => {
    // An entry whose key is a varint, then 65 well-formed descriptors.
    const badEntry = Buffer.from([0x12, 0x04, 0x0a, 0x02, 0x08, 0x01]);
    const request = Buffer.concat([
      badEntry,
      encode({ domain: 'api', descriptors: descriptors(65) }),
    ]);
    expect(rejection(request)).toMatch(/: 66 descriptors exceed MAX_DESCRIPTORS \(64\)$/);
    const alone = Buffer.concat([badEntry, encode({ domain: 'api', descriptors: descriptors(1) })]);
    expect(rejection(alone)).toMatch(/malformed request: invalid tag 8/);
  });
});

describe('encoding a response', () => {
  const decodeResponse = (bytes: Buffer) =>
    ResponseType.toObject(ResponseType.decode(bytes), { enums: String, longs: String });

  it('writes the decision with limits, remaining, durations and headers', () => {
    const decision: Decision = {
      code: 'OVER_LIMIT',
      statuses: [
        {
          code: 'OVER_LIMIT',
          currentLimit: { requestsPerUnit: 10, unit: 'week', name: 'weekly' },
          limitRemaining: 0,
          durationUntilResetMs: 90_061_250,
        },
        {
          code: 'OK',
          currentLimit: { requestsPerUnit: 5, unit: 'unknown', name: '30s' },
          limitRemaining: 4,
          durationUntilResetMs: 999,
        },
        { code: 'OK', limitRemaining: 4294967295 },
      ],
    };
    const headers = [{ key: 'Retry-After', value: '90062' }];
    expect(decodeResponse(encodeResponse(decision, headers))).toEqual({
      overall_code: 'OVER_LIMIT',
      statuses: [
        {
          code: 'OVER_LIMIT',
          current_limit: { requests_per_unit: 10, unit: 'WEEK', name: 'weekly' },
          limit_remaining: 0,
          duration_until_reset: { seconds: '90061', nanos: 250_000_000 },
        },
        {
          code: 'OK',
          current_limit: { requests_per_unit: 5, unit: 'UNKNOWN', name: '30s' },
          limit_remaining: 4,
          duration_until_reset: { seconds: '0', nanos: 999_000_000 },
        },
        { code: 'OK', limit_remaining: 4294967295 },
      ],
      response_headers_to_add: headers,
    });
  });

  it('writes the decision headers, and metadata as a dynamic_metadata Struct', () => {
    const decision: Decision = {
      code: 'OK',
      statuses: [{ code: 'OK', limitRemaining: 1 }],
      headers: [{ key: 'RateLimit', value: '"default";r=1;t=2' }],
      dynamicMetadata: {
        plan: 'gold',
        weight: 2,
        beta: true,
        none: null,
        tags: ['a', 1],
        nested: { k: 'v' },
      },
    };
    const decoded = decodeResponse(encodeResponse(decision));
    expect(decoded.response_headers_to_add).toEqual([
      { key: 'RateLimit', value: '"default";r=1;t=2' },
    ]);
    expect(decoded.dynamic_metadata).toEqual({
      fields: {
        plan: { stringValue: 'gold' },
        weight: { numberValue: 2 },
        beta: { boolValue: true },
        none: { nullValue: 'NULL_VALUE' },
        tags: { listValue: { values: [{ stringValue: 'a' }, { numberValue: 1 }] } },
        nested: { structValue: { fields: { k: { stringValue: 'v' } } } },
      },
    });
  });

  it('never encodes an overall_code of UNKNOWN', () => {
    const bogus = { code: 'UNKNOWN', statuses: [] } as unknown as Decision;
    expect(() => encodeResponse(bogus)).toThrow(/cannot encode decision code UNKNOWN/);
  });
});
