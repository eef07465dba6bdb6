import { describe, expect, it } from 'vitest';
import { fixedWindowCounting } from '../../src/store/fixedWindowScript.js';
import { batchCall, decideCall } from '../../src/store/script.js';
import type { CounterCheck } from '../../src/store/Store.js';

// Which script decides a request: the plain fixed-window one only when it would decide exactly
// as the decision script does, the decision script otherwise.

const plain: CounterCheck = {
  key: 'k:{t}:1',
  algorithm: 'fixed_window',
  windowMs: 60_000,
  limit: 10,
  burst: 10,
  cost: 1,
  shadow: false,
  quota: false,
  overdraw: false,
};
const reference = { ...plain, reference: { stop: false, held: false, cached: false } };

describe('the script a request runs', () => {
  it('is the fixed-window script for plain fixed windows, or for the reference counting alone', () => {
    expect(fixedWindowCounting([plain, { ...plain, key: 'k:{t}:2' }])).toBe('plain');
    expect(fixedWindowCounting([reference, reference])).toBe('reference');
  });

  it('is the decision script for any flag, another algorithm, a mix, or none', () => {
    const others: CounterCheck[] = [
      { ...plain, shadow: true },
      { ...plain, quota: true },
      { ...plain, overdraw: true },
      { ...plain, renew: true },
      { ...plain, algorithm: 'sliding_window' },
      { ...plain, algorithm: 'token_bucket' },
      { ...reference, reference: { stop: true, held: false, cached: false } },
      { ...reference, reference: { stop: false, held: false, cached: true } },
    ];
    for (const other of others) expect(fixedWindowCounting([plain, other])).toBeUndefined();
    expect(fixedWindowCounting([plain, reference])).toBeUndefined();
    expect(fixedWindowCounting([])).toBeUndefined();
  });

  it('sends 3 arguments per counter to the fixed-window script, and a batch goes there only whole', () => {
    const call = decideCall([plain], { nowMs: undefined, skewToleranceMs: 0 });
    expect(call).toMatchObject({
      script: 'fixedWindow',
      args: [1, plain.key, '', 0, 0, 60_000, 10, 1],
    });
    const mixed = [
      { checks: [plain], nowMs: 5 },
      { checks: [{ ...plain, shadow: true }], nowMs: 5 },
    ];
    expect(batchCall(mixed, 0).script).toBe('decision');
    expect(batchCall([{ checks: [reference], nowMs: 5 }], 7)).toMatchObject({
      script: 'fixedWindow',
      args: [1, plain.key, 'batch', 7, 1, 1, 60_000, 10, 1, 5, 1, 1, 1],
    });
  });
});
