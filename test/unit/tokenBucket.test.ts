import { describe, expect, it } from 'vitest';
import { checkTokenBucketExact, tokenBucketScale } from '../../src/rules/tokenBucket.js';

describe('tokenBucketScale', () => {
  it('reduces limit per window by their gcd', () => {
    expect(tokenBucketScale(600, 60_000)).toEqual({ scale: 100, refill: 1 });
    expect(tokenBucketScale(7, 1_000)).toEqual({ scale: 1_000, refill: 7 });
    expect(tokenBucketScale(5_000, 1_000)).toEqual({ scale: 1, refill: 5 });
  });
});

describe('checkTokenBucketExact', () => {
  it('accepts buckets whose scaled burst fits in 2^52', () => {
    expect(checkTokenBucketExact(600, 60_000, 50)).toBeUndefined();
    expect(checkTokenBucketExact(4_294_967_295, 1_000, 4_294_967_295)).toBeUndefined();
    expect(checkTokenBucketExact(0, 31_536_000_000, 4_294_967_295)).toBeUndefined();
  });

  it('accepts exactly 2^52 and rejects one scaled unit more', () => {
    // scale 2^20 (window 2^20 ms, limit 1): burst 2^32 reaches 2^52 exactly.
    expect(checkTokenBucketExact(1, 2 ** 20, 2 ** 32)).toBeUndefined();
    expect(checkTokenBucketExact(1, 2 ** 20, 2 ** 32 + 1)).toMatch(
      /^token bucket too fine for exact integer arithmetic: .*use a shorter unit or window, or a smaller burst$/,
    );
  });
});
