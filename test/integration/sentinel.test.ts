import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { counterKey } from '../../src/store/keys.js';
import { loadSummary, underLoad, waitFor, type LoadCall } from '../support/redisCluster.js';
import { startRedisSentinel, type TestSentinel } from '../support/redisSentinel.js';
import {
  codes,
  d,
  eventually,
  healthStatus,
  isProbeKey,
  startTollgate,
  type Tollgate,
} from '../support/tollgate.js';

// tollgate behind Redis Sentinel: it finds the master through the sentinels, in either URL form,
// and follows a failover by itself. Every call made during the failover answers within
// REDIS_TIMEOUT plus a margin, and calls recover without a restart.

const RULES = `
domain: api
descriptors:
  - key: tenant
    rate_limit: {unit: hour, requests_per_unit: 100000}
  - key: small
    rate_limit: {unit: hour, requests_per_unit: 3, algorithm: token_bucket}
`;
const TIMEOUT_MS = 250;
const MARGIN_MS = 750;

let sentinel: TestSentinel;
let tollgate: Tollgate | undefined;

beforeAll(async () => {
  sentinel = await startRedisSentinel();
}, 60_000);
afterAll(() => sentinel?.stop());
afterEach(async () => {
  await tollgate?.stop();
  tollgate = undefined;
});

async function startOnSentinel(url: string, env: Record<string, string> = {}): Promise<Tollgate> {
  const started = await startTollgate({
    rules: RULES,
    env: { REDIS_TYPE: 'sentinel', REDIS_URL: url, ...env },
  });
  await eventually(async () => (await healthStatus(started.address)) === 'SERVING', 10_000);
  return started;
}

describe('through the sentinels', () => {
  it.each([
    ['redis+sentinel://', () => sentinel.url],
    ["the reference's NAME,host:port,...", () => sentinel.referenceUrl],
  ])('decides on the master they name, with %s', async (_, url) => {
    tollgate = await startOnSentinel(url(), { CLOCK: 'redis' });
    const request = { domain: 'api', descriptors: [d('small', url())] };
    const answers = [];
    for (let i = 0; i < 4; i++) answers.push(codes(await tollgate.check(request))[0]);
    expect(answers).toEqual(['OK', 'OK', 'OK', 'OVER_LIMIT']);
    // The counter is on the master.
    const master = sentinel.client(await sentinel.masterPort());
    const entries = [{ key: 'small', value: url() }];
    const key = counterKey('', 'api', entries, undefined, 'token_bucket', 3_600_000);
    expect(await master.exists(key)).toBe(1);
  });
});

describe('SENTINEL FAILOVER under load', () => {
  it('recovers by itself, and every call answers within the timeout plus a margin', async () => {
    tollgate = await startOnSentinel(sentinel.url, { REDIS_TIMEOUT: `${TIMEOUT_MS}ms` });
    const client = tollgate;
    const request = { domain: 'api', descriptors: [d('tenant', 'acme')] };
    let moved = { from: 0, to: 0 };
    const { calls, window } = await underLoad(
      async () => codes(await client.check(request))[0]!,
      { concurrency: 8, tailMs: 1_000 },
      async () => {
        await new Promise((resolve) => setTimeout(resolve, 300));
        moved = await sentinel.failover();
        // Recovered: a call succeeds again on the new master.
        await waitFor(async () => codes(await client.check(request))[0] === 'OK', 15_000);
      },
    );
    console.log(
      loadSummary(`sentinel failover ${moved.from} -> ${moved.to}`, calls) +
        `, failover window ${window[1] - window[0]} ms`,
    );
    expect(moved.to).not.toBe(moved.from);
    expectAnsweredInTime(calls);
    const last = calls
      .slice()
      .sort((a, b) => a.at - b.at)
      .slice(-20);
    expect(last.map((call) => call.answer)).toEqual(last.map(() => 'OK'));
    // The new master holds the counter.
    const counters = (await sentinel.client(moved.to).keys('tg:*')).filter((k) => !isProbeKey(k));
    expect(counters.length).toBeGreaterThan(0);
  }, 60_000);
});

function expectAnsweredInTime(calls: LoadCall[]) {
  for (const answer of new Set(calls.map((call) => call.answer))) {
    expect(['OK', 'UNAVAILABLE']).toContain(answer);
  }
  expect(Math.max(...calls.map((call) => call.ms))).toBeLessThan(TIMEOUT_MS + MARGIN_MS);
}
