import { describe, it, expect } from 'vitest';
import fc from 'fast-check';
import type { Decision, DescriptorStatus, ReportedUnit } from '../../src/core/check.js';
import { encodeResponse } from '../../src/servers/grpc/codec.js';
import { encodeResponseFrame } from '../../src/servers/grpc/responseFrame.js';
import type { JsonValue } from '../../src/rules/types.js';

const units: ReportedUnit[] = [
  'unknown',
  'second',
  'minute',
  'hour',
  'day',
  'month',
  'year',
  'week',
];
// Every width a varint can take below 2^53, and values past uint32 that must clamp.
const number = fc.oneof(
  fc.constantFrom(0, 1, 127, 128, 16_383, 16_384, 2 ** 31, 2 ** 32 - 1, 2 ** 32, 2 ** 40),
  fc.integer({ min: 0, max: 2 ** 32 + 5 }),
  fc.double({ min: -10, max: 2 ** 45, noNaN: true }),
  fc.constantFrom(Number.NaN, Number.POSITIVE_INFINITY, -1),
);
const text = fc.string({ unit: 'binary', maxLength: 300 });

const status: fc.Arbitrary<DescriptorStatus> = fc.record(
  {
    code: fc.constantFrom('OK' as const, 'OVER_LIMIT' as const),
    currentLimit: fc.record({
      requestsPerUnit: number,
      unit: fc.constantFrom(...units),
      name: text,
    }),
    limitRemaining: number,
    durationUntilResetMs: fc.oneof(number, fc.double({ min: 0, max: 1e7, noNaN: true })),
  },
  { requiredKeys: ['code', 'limitRemaining'] },
);
const json: fc.Arbitrary<JsonValue> = fc.letrec<{ value: JsonValue }>((tie) => ({
  value: fc.oneof(
    { depthSize: 'small' },
    fc.constant(null),
    fc.boolean(),
    fc.string(),
    fc.double({ noNaN: true }),
    fc.array(tie('value'), { maxLength: 3 }),
    fc.dictionary(fc.string({ maxLength: 5 }), tie('value'), { maxKeys: 3 }),
  ),
})).value;
const decision: fc.Arbitrary<Decision> = fc.record(
  {
    code: fc.constantFrom('OK' as const, 'OVER_LIMIT' as const),
    statuses: fc.array(status, { maxLength: 70 }),
    headers: fc.array(fc.record({ key: text, value: text }), { maxLength: 4 }),
    dynamicMetadata: fc.dictionary(fc.string({ maxLength: 8 }), json, { maxKeys: 3 }),
  },
  { requiredKeys: ['code', 'statuses'] },
);

describe('the hand-written response frame', () => {
  it('holds the bytes protobufjs writes, behind a 5-byte uncompressed prefix', () => {
    fc.assert(
      fc.property(decision, (decided) => {
        const frame = encodeResponseFrame(decided);
        const expected = encodeResponse(decided);
        expect(frame[0]).toBe(0);
        expect(frame.readUInt32BE(1)).toBe(expected.length);
        expect(frame.subarray(5).toString('hex')).toBe(expected.toString('hex'));
      }),
      { numRuns: 2_000 },
    );
  });

  it('encodes a reply that never changes once, and answers it unchanged', () => {
    const plain: Decision = {
      code: 'OK',
      statuses: [
        { code: 'OK', limitRemaining: 0 },
        { code: 'OK', limitRemaining: 0 },
      ],
    };
    const first = encodeResponseFrame(plain);
    expect(encodeResponseFrame({ ...plain, statuses: [...plain.statuses] })).toBe(first);
    expect(first.subarray(5).toString('hex')).toBe(encodeResponse(plain).toString('hex'));
    const other = encodeResponseFrame({
      code: 'OK',
      statuses: [{ code: 'OK', limitRemaining: 0 }],
    });
    expect(other).not.toBe(first);
  });

  it('refuses a code it cannot encode', () => {
    const bogus = { code: 'UNKNOWN', statuses: [] } as unknown as Decision;
    expect(() => encodeResponseFrame(bogus)).toThrow(/cannot encode decision code UNKNOWN/);
    const badStatus = {
      code: 'OK',
      statuses: [{ code: 'UNKNOWN', limitRemaining: 1 }],
    } as unknown as Decision;
    expect(() => encodeResponseFrame(badStatus)).toThrow(/cannot encode decision code UNKNOWN/);
  });
});
