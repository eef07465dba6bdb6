import { describe, expect, it } from 'vitest';
import { formatDuration, parseGoDuration } from '../../src/core/duration.js';

describe('parseGoDuration', () => {
  it.each([
    ['0', 0],
    ['+0', 0],
    ['0s', 0],
    ['30s', 30_000],
    ['5m', 300_000],
    ['1h30m', 5_400_000],
    ['1.5h', 5_400_000],
    ['500ms', 500],
    ['2h45m10s', 9_910_000],
    ['+30s', 30_000],
    ['.5s', 500],
    ['1.s', 1_000],
    ['0.1s', 100],
    ['1500us', 1.5],
    ['1500µs', 1.5],
    ['1500μs', 1.5],
    ['2000000ns', 2],
    ['1m1m', 120_000],
    ['8760h', 31_536_000_000],
  ])('%s is %d ms', (text, ms) => {
    expect(parseGoDuration(text)).toBe(ms);
  });

  it.each([
    ['', "invalid duration '': empty"],
    ['-5s', "invalid duration '-5s': must not be negative"],
    ['-0', "invalid duration '-0': must not be negative"],
    ['5', "invalid duration '5': missing unit after '5'"],
    ['1h30', "invalid duration '1h30': missing unit after '30'"],
    ['5x', "invalid duration '5x': unknown unit 'x'"],
    ['5 s', "invalid duration '5 s': unknown unit ' s'"],
    ['s', "invalid duration 's': expected a number at 's'"],
    ['.s', "invalid duration '.s': expected a number at '.s'"],
    [' 5s', "invalid duration ' 5s': expected a number at ' 5s'"],
    ['1d', "invalid duration '1d': unknown unit 'd'"],
    ['3000000h', "invalid duration '3000000h': out of range"],
  ])('rejects %j', (text, message) => {
    expect(() => parseGoDuration(text)).toThrow(new Error(message));
  });
});

describe('formatDuration', () => {
  it.each([
    [0, '0s'],
    [500, '500ms'],
    [30_000, '30s'],
    [90_000, '1m30s'],
    [3_600_000, '1h'],
    [5_400_000, '1h30m'],
    [1_500, '1s500ms'],
    [31_536_000_000, '8760h'],
    [1.5, '1ms500us'],
  ])('%d ms is %s', (ms, text) => {
    expect(formatDuration(ms)).toBe(text);
  });

  it('reads back to the same milliseconds', () => {
    for (const ms of [0, 1, 999, 1_000, 61_001, 86_400_000, 9_910_000]) {
      expect(parseGoDuration(formatDuration(ms))).toBe(ms);
    }
  });

  it('rejects negative and non-finite milliseconds', () => {
    expect(() => formatDuration(-1)).toThrow(RangeError);
    expect(() => formatDuration(Number.NaN)).toThrow(RangeError);
  });
});
