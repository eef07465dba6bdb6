import { afterEach, describe, expect, it } from 'vitest';
import { d, resetMs, startTollgate, type Tollgate } from '../support/tollgate.js';

// Under COMPAT_MODE=reference, duration_until_reset is what envoyproxy/ratelimit answers: whole
// seconds, the unit less the whole seconds elapsed in it (W − (now_s mod W)), nanos 0. The clock
// is the test's, so every instant is chosen.

const RULES = `
domain: compat
descriptors:
  - key: minute
    rate_limit: { unit: minute, requests_per_unit: 5 }
  - key: zero
    rate_limit: { unit: hour, requests_per_unit: 0 }
`;

let tollgate: Tollgate | undefined;
afterEach(async () => {
  await tollgate?.stop();
  tollgate = undefined;
});

describe('duration_until_reset under COMPAT_MODE=reference', () => {
  it('is the unit less the whole seconds elapsed in it', async () => {
    tollgate = await startTollgate({ rules: RULES, env: { COMPAT_MODE: 'reference' } });
    const { clock } = tollgate;
    const reset = async (key: string) =>
      resetMs(
        (await tollgate!.check({ domain: 'compat', descriptors: [d(key, 'a')] })).statuses![0]!,
      );
    // The clock starts on a minute's first millisecond.
    expect(await reset('minute')).toBe(60_000);
    clock.advance(999);
    expect(await reset('minute')).toBe(60_000);
    clock.advance(1);
    expect(await reset('minute')).toBe(59_000);
    clock.advance(58_500); // 59.5 s into the minute
    expect(await reset('minute')).toBe(1_000);
    // Denied, and requests_per_unit: 0: the same whole seconds.
    for (let i = 0; i < 3; i++) await reset('minute');
    expect(await reset('minute')).toBe(1_000);
    expect(await reset('zero')).toBe(3_600_000 - 59_000);
  });

  it('stays exact to the millisecond outside it', async () => {
    tollgate = await startTollgate({
      rules: RULES.replace(
        'requests_per_unit: 5 }',
        'requests_per_unit: 5, algorithm: fixed_window }',
      ),
    });
    tollgate.clock.advance(1_234);
    const answer = await tollgate.check({ domain: 'compat', descriptors: [d('minute', 'a')] });
    expect(resetMs(answer.statuses![0]!)).toBe(60_000 - 1_234);
  });
});
