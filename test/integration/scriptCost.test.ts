import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { runScriptCost } from '../../bench/scriptCost.js';
import { startRedis, type TestRedis } from '../support/redis.js';

// The bench's account of what a script call costs Redis: every variant runs on a real Redis, and
// the decision script, which reads, decides and writes, costs Redis more than `return 1`.
describe('the script cost bench', () => {
  let redis: TestRedis;
  beforeAll(async () => {
    redis = await startRedis();
  });
  afterAll(async () => {
    await redis?.stop();
  });

  it('times every variant with Redis own figures, and the real scripts above an empty one', async () => {
    const rows = await runScriptCost(redis.client, { calls: 400, rounds: 1 });
    expect(rows.map((row) => `${row.variant}/${row.counters}`)).toHaveLength(9);
    for (const row of rows) expect(row.medianUs).toBeGreaterThan(0);
    const empty = rows.find((row) => row.counters === 0);
    const real = rows.filter((row) => row.counters === 3 && row.variant.startsWith("tollgate's"));
    expect(real).toHaveLength(2);
    for (const row of real) expect(row.medianUs).toBeGreaterThan(empty!.medianUs);
    // Both scripts really counted: 400 calls over 50 tenants, 8 each, one unit a call.
    expect(Number(await redis.client.hget('tg:{7}:shipped3:0', 'c'))).toBe(8);
    expect(Number(await redis.client.hget('tg:{7}:fixed3:2', 'c'))).toBe(8);
  });
});
