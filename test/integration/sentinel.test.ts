import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import type { Redis } from 'ioredis';
import { counterKey } from '../../src/store/keys.js';
import { decisionCode } from '../../src/store/library.js';
import { CALL_PATHS } from '../support/redis.js';
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
// REDIS_TIMEOUT plus a margin, and calls recover without a restart, on either call path: the
// function library comes with the replica, and a promoted replica that lost it loads it again.

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

describe('a replica', () => {
  it('refuses FUNCTION FLUSH and FUNCTION DELETE: it can lose the library only with its master', async () => {
    const replica = sentinel.client((await replicaPorts())[0]!);
    await expect(replica.call('FUNCTION', 'FLUSH')).rejects.toThrow(/^READONLY/);
    await expect(replica.call('FUNCTION', 'DELETE', 'tollgate_0000000000000000')).rejects.toThrow(
      /^READONLY/,
    );
  });
});

describe.each(CALL_PATHS)('SENTINEL FAILOVER under load, calls as %s', (path) => {
  it('recovers by itself, and every call answers within the timeout plus a margin', async () => {
    tollgate = await startOnSentinel(sentinel.url, {
      REDIS_TIMEOUT: `${TIMEOUT_MS}ms`,
      REDIS_FUNCTIONS: path === 'functions' ? 'on' : 'off',
    });
    const client = tollgate;
    const request = { domain: 'api', descriptors: [d('tenant', 'acme')] };
    const dataPorts = [await sentinel.masterPort(), ...(await replicaPorts())];
    // From here on, a failed call on a data node is one of this test's.
    await Promise.all(dataPorts.map((port) => sentinel.client(port).config('RESETSTAT')));
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
      loadSummary(`sentinel failover (${path}) ${moved.from} -> ${moved.to}`, calls) +
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
    const promoted = sentinel.client(moved.to);
    const counters = (await promoted.keys('tg:*')).filter((k) => !isProbeKey(k));
    expect(counters.length).toBeGreaterThan(0);
    if (path === 'scripts') return;

    // The library came with the replica's data: no call on it found the library missing.
    expect(await libraryNames(promoted)).toEqual([decisionCode().library.name]);
    expect(await failedFcalls(promoted)).toBe(0);
    // A promoted replica that then lost it: the next check loads it again, and is decided.
    await promoted.call('FUNCTION', 'FLUSH');
    expect(codes(await client.check(request))[0]).toBe('OK');
    expect(await libraryNames(promoted)).toEqual([decisionCode().library.name]);
    expect(await failedFcalls(promoted)).toBeGreaterThanOrEqual(1);
  }, 60_000);
});

/** The data nodes that are replicas now. */
async function replicaPorts(): Promise<number[]> {
  const master = sentinel.client(await sentinel.masterPort());
  const info = await master.info('replication');
  return [...info.matchAll(/^slave\d+:ip=[^,]+,port=(\d+)/gm)].map((match) => Number(match[1]));
}

async function libraryNames(node: Redis): Promise<string[]> {
  const listed = (await node.call('FUNCTION', 'LIST')) as unknown[][];
  return listed.map((entry) => String(entry[1]));
}

/** FCALLs that failed on a node since its last RESETSTAT ("ERR Function not found" among them). */
async function failedFcalls(node: Redis): Promise<number> {
  const info = await node.info('commandstats');
  return Number(/^cmdstat_fcall:.*failed_calls=(\d+)/m.exec(info)?.[1] ?? 0);
}

function expectAnsweredInTime(calls: LoadCall[]) {
  for (const answer of new Set(calls.map((call) => call.answer))) {
    expect(['OK', 'UNAVAILABLE']).toContain(answer);
  }
  expect(Math.max(...calls.map((call) => call.ms))).toBeLessThan(TIMEOUT_MS + MARGIN_MS);
}
