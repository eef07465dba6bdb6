import { describe, expect, it } from 'vitest';
import { referenceCounts } from '../../src/decision/referenceCounts.js';

// COMPAT_MODE=reference's split of a descriptor's hits among the statistics, worked by hand from
// the reference's rules (its differential tests compare the totals with the real server).

const none = { over: 0, near: 0, within: 0, shadow: 0, localCache: 0 };

describe('the reference split of hits', () => {
  it('counts hits within the limit, and those past the near threshold as near too', () => {
    // Limit 10 at 0.8: the near threshold is 8.
    expect(referenceCounts(10, 3, 3, 0.8, false)).toEqual({ ...none, within: 3 });
    expect(referenceCounts(10, 9, 2, 0.8, false)).toEqual({ ...none, within: 2, near: 1 });
    expect(referenceCounts(10, 10, 1, 0.8, false)).toEqual({ ...none, within: 1, near: 1 });
  });

  it('counts as over only the hits past the limit, and the ones before them as near', () => {
    expect(referenceCounts(10, 12, 5, 0.8, false)).toEqual({ ...none, over: 2, near: 2 });
    expect(referenceCounts(10, 15, 5, 0.8, false)).toEqual({ ...none, over: 5 });
    expect(referenceCounts(10, 12, 5, 0.8, true)).toEqual({ ...none, over: 2, near: 2, shadow: 2 });
    expect(referenceCounts(0, 1, 1, 0.8, false)).toEqual({ ...none, over: 1 });
  });

  it('takes the near threshold in single precision, rounded down', () => {
    // float32(3) * float32(0.8) is 2.4000001: the threshold is 2.
    expect(referenceCounts(3, 3, 1, 0.8, false)).toEqual({ ...none, within: 1, near: 1 });
    expect(referenceCounts(5, 5, 1, 0.8, false)).toEqual({ ...none, within: 1, near: 1 });
  });

  it('reads a count below the hits (nothing incremented) as a count before that passed everything', () => {
    // STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT left the counter at 3 for a cost of 5.
    expect(referenceCounts(10, 3, 5, 0.8, false)).toEqual({ ...none, within: 5 });
    expect(referenceCounts(4, 4, 5, 0.5, false)).toEqual({ ...none, within: 5, near: 5 });
  });

  it('counts a descriptor answered from the local cache as over, and as such', () => {
    expect(referenceCounts(10, undefined, 3, 0.8, false)).toEqual({
      ...none,
      over: 3,
      localCache: 3,
    });
    expect(referenceCounts(10, undefined, 3, 0.8, true)).toEqual({
      ...none,
      over: 3,
      localCache: 3,
      shadow: 3,
    });
  });
});
