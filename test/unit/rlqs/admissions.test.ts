// Over-admission from the reports: per counter and epoch-aligned window, what passed the limit.
import { describe, expect, it } from 'vitest';
import { createAdmissionWatch } from '../../../src/rlqs/admissions.js';

const W = 60_000;
const T0 = 1_800_000_000_000; // a window's start

describe('the admission watch', () => {
  it('counts what passes the limit in each window, and starts again in the next', () => {
    const watch = createAdmissionWatch(10);
    expect(watch.add('k', 100, W, 90, T0 + 1_000)).toBe(0);
    expect(watch.add('k', 100, W, 15, T0 + 59_000)).toBe(5);
    expect(watch.add('k', 100, W, 15, T0 + W)).toBe(0);
    expect(watch.add('k', 100, W, 90, T0 + W + 1)).toBe(5);
  });

  it('follows at most its bound of counters, and forgets old windows to make room', () => {
    const watch = createAdmissionWatch(2);
    watch.add('a', 1, W, 1, T0);
    watch.add('b', 1, W, 1, T0);
    expect(watch.add('c', 1, W, 5, T0)).toBe(0);
    expect(watch.pools()).toBe(2);
    // Two windows later, a and b no longer matter: c takes a place.
    expect(watch.add('c', 1, W, 5, T0 + 2 * W)).toBe(4);
    expect(watch.pools()).toBe(1);
  });
});
