import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { codes, d, startTollgate, type Tollgate } from '../support/tollgate.js';

let tollgate: Tollgate;
beforeAll(async () => {
  tollgate = await startTollgate({
    rules: `
domain: api
descriptors:
  - key: tenant
    rate_limit: {unit: minute, requests_per_unit: 2}
`,
  });
});
afterAll(() => tollgate?.stop());

describe('smoke', () => {
  it('allows twice then denies', async () => {
    const r1 = await tollgate.check({ domain: 'api', descriptors: [d('tenant', 'a')] });
    const r2 = await tollgate.check({ domain: 'api', descriptors: [d('tenant', 'a')] });
    const r3 = await tollgate.check({ domain: 'api', descriptors: [d('tenant', 'a')] });
    expect(codes(r1)).toEqual(['OK', 'OK']);
    expect(codes(r2)).toEqual(['OK', 'OK']);
    expect(codes(r3)).toEqual(['OVER_LIMIT', 'OVER_LIMIT']);
    console.log(JSON.stringify(r3));
  });
});
