import { readFileSync } from 'node:fs';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { metricValue } from '../support/metrics.js';
import { httpFlood } from '../support/httpFlood.js';
import { probeCalls } from '../support/probeCalls.js';
import { rssMb, spawnTollgate, type TollgateProcess } from '../support/processes.js';
import { startRedis, type TestRedis } from '../support/redis.js';
import { callCheck, d, eventually } from '../support/tollgate.js';

// A flood of /metrics scrapes with WORKERS=2: each scrape of a worker asked the cluster primary
// for a sum, and the primary asked every worker for its counts, once per scrape. At hundreds of
// scrapes a second the workers spent their time on snapshots, checks failed with Redis timeouts
// while Redis was healthy, and memory grew by 400 MB. Here sixteen clients scrape as fast as they
// can while two probes make checks. REDIS_TIMEOUT is 250 ms rather than 15 ms, so that only a
// starved worker, not a busy test machine, fails a check.

// 500 rules, each with its own series once it has been hit: an exposition of about 100 kB.
const TENANTS = 500;
const CLIENTS = 16;
const RULES = `
domain: api
descriptors:
  - key: tenant
    rate_limit: {unit: hour, requests_per_unit: 1000000}
${Array.from(
  { length: TENANTS },
  (_, i) =>
    `  - key: tenant\n    value: t${i}\n    rate_limit: {unit: hour, requests_per_unit: 1000000}\n`,
).join('')}`;

let redis: TestRedis;
let tollgate: TollgateProcess;
beforeAll(async () => {
  redis = await startRedis();
  tollgate = await spawnTollgate(RULES, {
    WORKERS: '2',
    REDIS_URL: redis.url,
    REDIS_TIMEOUT: '250ms',
  });
  // Both workers serve before the flood starts.
  await eventually(async () => workerPids(tollgate.child.pid!).length === 2, 30_000);
}, 60_000);
afterAll(async () => {
  expect(await tollgate?.stop()).toBe(0);
  await redis?.stop();
}, 30_000);

/** The primary's children: its workers. */
function workerPids(pid: number): number[] {
  const children = readFileSync(`/proc/${pid}/task/${pid}/children`, 'utf8').trim();
  return children === '' ? [] : children.split(' ').map(Number);
}

const totalRssMb = (pid: number) =>
  [pid, ...workerPids(pid)].reduce((sum, each) => sum + rssMb(each), 0);

describe('a /metrics flood with WORKERS=2', () => {
  it('fails no check, keeps memory bounded, and answers scrapes with the sum', async () => {
    const pid = tollgate.child.pid!;
    // Warm up: every series exists, and the processes have their working memory.
    for (let i = 0; i < TENANTS; i += 10) {
      await Promise.all(
        Array.from({ length: 10 }, (_, j) =>
          callCheck(tollgate.client, {
            domain: 'api',
            descriptors: [d('tenant', `t${i + j}`)],
          }).catch(() => undefined),
        ),
      );
    }
    await (await fetch(`${tollgate.httpUrl}/metrics`)).text();
    const rssBefore = totalRssMb(pid);

    const probes = [probeCalls(tollgate), probeCalls(tollgate)];
    await new Promise((resolve) => setTimeout(resolve, 500));
    let rssPeak = rssBefore;
    const sampler = setInterval(() => (rssPeak = Math.max(rssPeak, totalRssMb(pid))), 200);
    const flood = await httpFlood(`${tollgate.httpUrl}/metrics`, CLIENTS, 4_000);
    clearInterval(sampler);
    const results = await Promise.all(probes.map((probe) => probe.stop()));

    const scrapes = new Map<string, number>();
    for (const [answer, n] of Object.entries(flood)) {
      const status = answer.split(' ')[0] ?? answer;
      scrapes.set(status, (scrapes.get(status) ?? 0) + n);
    }
    const calls = results.reduce((sum, r) => sum + r.calls, 0);
    const failed = results.reduce((sum, r) => sum + r.failed, 0);
    const p99 = Math.max(...results.map((r) => r.p99Ms));
    console.log(
      `[metrics flood] ${[...scrapes].map(([s, n]) => `${n} scrapes ${s}`).join(', ')} in 4 s; ` +
        `${calls} checks, ${failed} failed, p99 ${p99.toFixed(1)} ms; ` +
        `RSS ${rssBefore.toFixed(0)} → peak ${rssPeak.toFixed(0)} MB`,
    );
    expect({ failed, errors: results.flatMap((r) => r.errors) }).toEqual({ failed: 0, errors: [] });
    expect(calls).toBeGreaterThan(200);
    // Starved, p99 was 700 ms here.
    expect(p99).toBeLessThan(250);
    expect(rssPeak - rssBefore).toBeLessThan(60);
    // Every scrape was answered with the sum: none is refused, since liveness probes scrape too.
    expect([...scrapes.keys()]).toEqual(['200']);
    expect(scrapes.get('200')).toBeGreaterThanOrEqual(CLIENTS);
    // A scrape after the probes stopped counts every one of their checks, on both workers.
    const after = await (await fetch(`${tollgate.httpUrl}/metrics`)).text();
    const labels = { domain: 'api', key1: 'tenant', key2: '' };
    expect(metricValue(after, 'ratelimit_service_rate_limit_total_hits', labels)).toBe(calls);
  }, 60_000);
});
