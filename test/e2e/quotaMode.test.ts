import { afterEach, describe, expect, it } from 'vitest';
import { codes, d, startTollgate, type Tollgate } from '../support/tollgate.js';

// The reference's global QUOTA_MODE, as its main has it: every descriptor is a quota
// descriptor, so a request is OVER_LIMIT only when every one of them is over; a descriptor
// without a limit is never over. A passing request consumes the quota descriptors that fit.

const RULES = `
domain: q
descriptors:
  - key: gq1
    rate_limit: {unit: minute, requests_per_unit: 10, algorithm: fixed_window}
  - key: gq2
    rate_limit: {unit: minute, requests_per_unit: 5, algorithm: fixed_window}
  - key: shadowed
    shadow_mode: true
    rate_limit: {unit: minute, requests_per_unit: 1, algorithm: fixed_window}
`;

let tollgate: Tollgate | undefined;
afterEach(async () => {
  await tollgate?.stop();
  tollgate = undefined;
});

const both = { domain: 'q', descriptors: [d('gq1', 'a'), d('gq2', 'a')] };

describe('QUOTA_MODE=true', () => {
  it('answers OK while one descriptor fits, consuming it, and OVER_LIMIT once both are over', async () => {
    tollgate = await startTollgate({ rules: RULES, env: { QUOTA_MODE: 'true' } });
    const answers = [];
    for (let i = 0; i < 11; i++) answers.push(await tollgate.check(both));
    // Calls 1 to 5 fit both; 6 to 10 only gq1, which they consume; 11 fits neither.
    expect(codes(answers[5]!)).toEqual(['OK', 'OK', 'OVER_LIMIT']);
    expect(answers[5]!.statuses?.map((s) => s.limit_remaining)).toEqual([4, 0]);
    expect(codes(answers[9]!)).toEqual(['OK', 'OK', 'OVER_LIMIT']);
    expect(codes(answers[10]!)).toEqual(['OVER_LIMIT', 'OVER_LIMIT', 'OVER_LIMIT']);
  });

  it('never denies beside a descriptor without a limit, or a shadow one', async () => {
    tollgate = await startTollgate({ rules: RULES, env: { QUOTA_MODE: 'true' } });
    for (let i = 0; i < 5; i++) await tollgate.check({ domain: 'q', descriptors: [d('gq2', 'b')] });
    const spent = await tollgate.check({ domain: 'q', descriptors: [d('gq2', 'b')] });
    expect(codes(spent)).toEqual(['OVER_LIMIT', 'OVER_LIMIT']);
    const unlimited = await tollgate.check({
      domain: 'q',
      descriptors: [d('gq2', 'b'), d('nothing', 'x')],
    });
    expect(codes(unlimited)).toEqual(['OK', 'OVER_LIMIT', 'OK']);
    const shadowed = await tollgate.check({
      domain: 'q',
      descriptors: [d('gq2', 'b'), d('shadowed', 'x')],
    });
    expect(codes(shadowed)).toEqual(['OK', 'OVER_LIMIT', 'OK']);
  });

  it('is off by default: each descriptor is enforced', async () => {
    tollgate = await startTollgate({ rules: RULES });
    const answers = [];
    for (let i = 0; i < 6; i++) answers.push(await tollgate.check(both));
    expect(codes(answers[5]!)).toEqual(['OVER_LIMIT', 'OK', 'OVER_LIMIT']);
  });
});

describe('QUOTA_MODE=true under COMPAT_MODE=reference', () => {
  it('counts every call on both descriptors, as the reference does, and denies once both are over', async () => {
    tollgate = await startTollgate({
      rules: RULES.replaceAll(', algorithm: fixed_window', ''),
      env: { QUOTA_MODE: 'true', COMPAT_MODE: 'reference' },
    });
    const answers = [];
    for (let i = 0; i < 12; i++) answers.push(await tollgate.check(both));
    // Call 6 passes on gq1 while gq2 is over; both count every call, so call 11 passes on
    // neither.
    expect(codes(answers[5]!)).toEqual(['OK', 'OK', 'OVER_LIMIT']);
    expect(answers[5]!.statuses?.map((s) => s.limit_remaining)).toEqual([4, 0]);
    expect(codes(answers[9]!)).toEqual(['OK', 'OK', 'OVER_LIMIT']);
    expect(codes(answers[10]!)).toEqual(['OVER_LIMIT', 'OVER_LIMIT', 'OVER_LIMIT']);
    expect(codes(answers[11]!)).toEqual(['OVER_LIMIT', 'OVER_LIMIT', 'OVER_LIMIT']);
  });
});
