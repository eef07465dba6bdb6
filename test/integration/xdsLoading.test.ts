import { afterEach, beforeAll, describe, expect, it } from 'vitest';
import { counterByLabel } from '../support/metrics.js';
import { startAdsFlood } from '../support/adsFlood.js';
import { probeCalls } from '../support/probeCalls.js';
import { startRedis } from '../support/redis.js';
import { rssMb, spawnTollgate, type TollgateProcess } from '../support/processes.js';
import { callCheck, d, eventually } from '../support/tollgate.js';
import {
  acked,
  buildXdsServer,
  isRequest,
  startXdsServer,
  xdsEnv,
  type XdsRequestEvent,
  type XdsServer,
} from '../support/xdsServer.js';

// Large and oversized updates over xDS, to the built service (`node dist/main.js`), whose updates
// load on a worker thread: calls keep being answered while one loads, and an update over
// XDS_CLIENT_MAX_MSG_SIZE_IN_BYTES is never taken, while the rules in force keep serving.

const NODE = 'loading-test';

function config(perMinute: number, extraRules = 0) {
  const descriptors: object[] = [
    { key: 'tenant', rate_limit: { unit: 'MINUTE', requests_per_unit: perMinute } },
  ];
  for (let i = 0; i < extraRules; i += 1) {
    descriptors.push({
      key: 'route',
      value: `/v1/resources/${i}/items`,
      rate_limit: { unit: 'SECOND', requests_per_unit: 1 + (i % 100) },
    });
  }
  return { name: 'api', domain: 'api', descriptors };
}

async function limitNow(t: TollgateProcess): Promise<number | undefined> {
  const response = await callCheck(t.client, { domain: 'api', descriptors: [d('tenant', 'x')] });
  return response.statuses?.[0]?.current_limit?.requests_per_unit;
}

describe('large updates over xDS, to the built service', () => {
  const cleanup: (() => Promise<unknown>)[] = [];
  beforeAll(() => {
    buildXdsServer();
  }, 600_000);
  afterEach(async () => {
    for (const step of cleanup.splice(0).reverse()) await step();
  });

  async function setup(env: Record<string, string> = {}): Promise<[XdsServer, TollgateProcess]> {
    const server = await startXdsServer();
    cleanup.push(() => server.stop());
    await server.set(NODE, 'v1', [config(100)]);
    const tollgate = await spawnTollgate('unused: true', xdsEnv(server, NODE, env));
    cleanup.push(() => tollgate.stop());
    await server.waitFor(acked('v1'));
    return [server, tollgate];
  }

  it('answers calls while an update of 20,000 rules loads, then applies it', async () => {
    const [server, tollgate] = await setup();
    const probe = probeCalls(tollgate);
    const pushed = performance.now();
    await server.set(NODE, 'v2', [config(50, 20_000)]);
    await server.waitFor(acked('v2'), 60_000);
    const loadMs = performance.now() - pushed;
    const { slowestMs, calls, failed } = await probe.stop();
    console.log(
      `[xds] 20,000 rules applied ${Math.round(loadMs)} ms after they were set; ` +
        `slowest of ${calls} calls meanwhile ${Math.round(slowestMs)} ms, ${failed} failed`,
    );
    expect(failed).toBe(0);
    expect(slowestMs).toBeLessThan(500);
    expect(await limitNow(tollgate)).toBe(50);
    const loads = await counterByLabel(tollgate.httpUrl, 'tollgate_config_loads_total', 'result');
    expect(loads.success).toBe(2);
  }, 120_000);

  it('refuses a 4 MB update of nested metadata before expanding it, naming the bound', async () => {
    const [server, tollgate] = await setup();
    const pid = tollgate.child.pid!;
    const rssBefore = rssMb(pid);
    let rssPeak = rssBefore;
    const sampler = setInterval(() => (rssPeak = Math.max(rssPeak, rssMb(pid))), 20);
    const probe = probeCalls(tollgate);
    const bomb = {
      name: 'bomb',
      domain: 'api',
      descriptors: [
        {
          key: 'tenant',
          rate_limit: { unit: 'MINUTE', requests_per_unit: 5 },
          metadata: { lists: Array.from({ length: 1_000_000 }, () => []) },
        },
      ],
    };
    const pushed = performance.now();
    await server.set(NODE, 'v2', [bomb]);
    const nack = (await server.waitFor(
      (e) => isRequest(e) && e.kind === 'nack',
      60_000,
    )) as XdsRequestEvent;
    const refusedMs = performance.now() - pushed;
    const { slowestMs, calls, failed } = await probe.stop();
    clearInterval(sampler);
    console.log(
      `[xds] a 4 MB metadata update refused ${Math.round(refusedMs)} ms after it was set; ` +
        `RSS ${Math.round(rssBefore)} → peak ${Math.round(rssPeak)} MB; ` +
        `slowest of ${calls} calls meanwhile ${Math.round(slowestMs)} ms, ${failed} failed`,
    );
    expect(nack.errorDetail?.message).toMatch(
      /^RateLimitConfig 'bomb': the update's descriptor metadata holds more than 100000 values/,
    );
    expect(failed).toBe(0);
    // No bound on the slowest call here: go-control-plane parsing a million-element JSON takes a
    // core of the two, and on a busy machine that alone held calls for a second. The pre-built
    // variant below bounds the wait that is tollgate's own.
    expect(rssPeak - rssBefore).toBeLessThan(150);
    expect(await limitNow(tollgate)).toBe(100);
    const loads = await counterByLabel(tollgate.httpUrl, 'tollgate_config_loads_total', 'result');
    expect(loads.error).toBe(1);
  }, 120_000);

  it('refuses the same 4 MB update from a server that sends it pre-built, with no call waiting long', async () => {
    // The server only writes bytes it built once: what the checks wait on is tollgate's work.
    const server = await startAdsFlood({ perSecond: 0 });
    cleanup.push(() => server.close());
    const tollgate = await spawnTollgate('unused: true', xdsEnv({ address: server.address }, NODE));
    cleanup.push(() => tollgate.stop());
    await eventually(async () => server.acks.includes('v0'));
    const pid = tollgate.child.pid!;
    const rssBefore = rssMb(pid);
    let rssPeak = rssBefore;
    const sampler = setInterval(() => (rssPeak = Math.max(rssPeak, rssMb(pid))), 20);
    const probe = probeCalls(tollgate);
    await new Promise((resolve) => setTimeout(resolve, 300));
    const sent = performance.now();
    server.bomb();
    try {
      // A NACK names the version still in force, v0.
      await eventually(async () => server.nacks.length > 0, 30_000);
    } finally {
      clearInterval(sampler);
    }
    const refusedMs = performance.now() - sent;
    await new Promise((resolve) => setTimeout(resolve, 300));
    const { slowestMs, calls, failed } = await probe.stop();
    console.log(
      `[xds] a pre-built 4 MB metadata update refused in ${Math.round(refusedMs)} ms; ` +
        `RSS ${Math.round(rssBefore)} → peak ${Math.round(rssPeak)} MB; ` +
        `slowest of ${calls} calls meanwhile ${Math.round(slowestMs)} ms, ${failed} failed`,
    );
    expect(server.nackMessages.at(-1)).toMatch(/descriptor metadata holds more than 100000 values/);
    expect(failed).toBe(0);
    // 100 ms on a quiet machine (docs/reliability.md); the margin is for a busy one.
    expect(slowestMs).toBeLessThan(400);
    expect(rssPeak - rssBefore).toBeLessThan(150);
  }, 60_000);

  it("gives back the loader's memory after each large update: a stream of them does not grow it", async () => {
    const [server, tollgate] = await setup();
    const pid = tollgate.child.pid!;
    /**
     * The RSS beyond the serving thread's heap: the loader's thread, its heap and what it leaves.
     * The serving thread's heap holds the rules in force, and old ones until V8 collects them.
     */
    const outsideMb = async () => {
      const text = await (await fetch(`${tollgate.httpUrl}/metrics`)).text();
      const heap = /^tollgate_nodejs_heap_size_total_bytes (\d+)/m.exec(text)?.[1];
      return rssMb(pid) - Number(heap) / 1024 / 1024;
    };
    const before = await outsideMb();
    const marginMb = 150;
    const after: number[] = [];
    for (const [i, version] of ['v2', 'v3'].entries()) {
      await server.set(NODE, version, [config(50 - i, 70_000)]);
      await server.waitFor(acked(version), 60_000);
      let outside = await outsideMb();
      await eventually(async () => (outside = await outsideMb()) < before + marginMb, 10_000).catch(
        () => {},
      );
      after.push(outside);
    }
    console.log(
      `[xds] two updates of 70,000 rules: RSS beyond the serving heap ${Math.round(before)} MB before, ` +
        `${after.map(Math.round).join(', ')} MB after each (RSS now ${Math.round(rssMb(pid))} MB)`,
    );
    expect(await limitNow(tollgate)).toBe(49);
    for (const outside of after) expect(outside - before).toBeLessThan(marginMb);
  }, 120_000);

  it('loads descriptors nested to the bound of 128 levels, and refuses one more in its own words', async () => {
    const [server, tollgate] = await setup();
    /** `levels` descriptors, each in the one before, beside a limit to see it in force. */
    const deep = (levels: number, perMinute: number) => {
      let descriptor: object = { key: 'leaf' };
      for (let i = 1; i < levels; i++) descriptor = { key: `k${i}`, descriptors: [descriptor] };
      const { descriptors } = config(perMinute);
      return { name: 'api', domain: 'api', descriptors: [...descriptors, descriptor] };
    };
    // protobufjs alone refuses past 100 levels, as "not a RateLimitConfig".
    await server.set(NODE, 'v2', [deep(128, 60)]);
    await server.waitFor(acked('v2'), 30_000);
    expect(await limitNow(tollgate)).toBe(60);
    await server.set(NODE, 'v3', [deep(129, 70)]);
    const nack = (await server.waitFor(
      (e) => isRequest(e) && e.kind === 'nack',
      30_000,
    )) as XdsRequestEvent;
    expect(nack.errorDetail?.message).toBe(
      "RateLimitConfig 'api': nests deeper than 128 messages (descriptors and their metadata)",
    );
    expect(await limitNow(tollgate)).toBe(60);
  }, 60_000);

  it('keeps answering checks while a management server floods it with updates', async () => {
    const flood = await startAdsFlood({ perSecond: 5_000 });
    cleanup.push(() => flood.close());
    const tollgate = await spawnTollgate('unused: true', xdsEnv({ address: flood.address }, NODE));
    cleanup.push(() => tollgate.stop());
    await eventually(async () => flood.acks.includes('v0'));
    // Checks back to back on 4 channels' worth of concurrency, as a busy Envoy sends them.
    const measure = async (ms: number) => {
      const latencies: number[] = [];
      let failed = 0;
      const until = performance.now() + ms;
      await Promise.all(
        Array.from({ length: 4 }, async () => {
          while (performance.now() < until) {
            const started = performance.now();
            try {
              await callCheck(tollgate.client, { domain: 'api', descriptors: [d('tenant', 'x')] });
              latencies.push(performance.now() - started);
            } catch {
              failed++;
            }
          }
        }),
      );
      latencies.sort((a, b) => a - b);
      const p99 = latencies[Math.floor(latencies.length * 0.99)] ?? Infinity;
      return { rate: (latencies.length * 1000) / ms, p99, failed };
    };
    await measure(1_000); // warm-up
    const idle = await measure(4_000);
    const acksBefore = flood.acks.length;
    flood.flood(true);
    const flooded = await measure(4_000);
    flood.flood(false);
    const acksDuring = flood.acks.length - acksBefore;
    const { count, last, limit } = await flood.sent();
    console.log(
      `[xds] idle: ${Math.round(idle.rate)} checks/s, p99 ${idle.p99.toFixed(1)} ms; ` +
        `under ${count} updates (5,000 a second): ${Math.round(flooded.rate)} checks/s, ` +
        `p99 ${flooded.p99.toFixed(1)} ms; ${acksDuring} versions ACKed during the flood`,
    );
    // The gap between loads grows while updates keep coming (100 ms, doubling, up to 1 s): in 4 s,
    // a handful of loads, where a fixed 100 ms gap made 56 to 70.
    expect(acksDuring).toBeLessThanOrEqual(12);
    expect(idle.failed + flooded.failed).toBe(0);
    // Generous, for a shared 2-core machine where the flood's own server takes CPU too (0.44 of
    // the idle rate was seen with a second test suite beside it); the quiet machine's figures are
    // in docs/reliability.md.
    expect(flooded.rate).toBeGreaterThan(idle.rate * 0.3);
    expect(flooded.p99).toBeLessThan(Math.max(idle.p99 * 4, idle.p99 + 50));
    // The last version is the one in force, and ACKed.
    await eventually(async () => flood.acks.includes(last), 10_000);
    expect(await limitNow(tollgate)).toBe(limit);
  }, 60_000);

  it('applies an update with no rules, and warns, naming the version and the domains dropped', async () => {
    const server = await startXdsServer();
    cleanup.push(() => server.stop());
    await server.set(NODE, 'v1', [config(100)]);
    const tollgate = await spawnTollgate('unused: true', xdsEnv(server, NODE), {
      captureStdout: true,
    });
    cleanup.push(() => tollgate.stop());
    await server.waitFor(acked('v1'));
    await server.set(NODE, 'empty-2', []);
    await server.waitFor(acked('empty-2'));
    await eventually(async () => tollgate.stdout().includes('xds update has no rules'));
    const line = tollgate
      .stdout()
      .split('\n')
      .find((l) => l.includes('xds update has no rules'));
    expect(JSON.parse(line!)).toMatchObject({
      level: 40,
      version: 'empty-2',
      droppedDomains: 1,
      dropped: ['api'],
    });
    expect(await limitNow(tollgate)).toBeUndefined();
  });

  it('with XDS_REFUSE_EMPTY_UPDATE=true, refuses an update with no rules, and keeps its own', async () => {
    const server = await startXdsServer();
    cleanup.push(() => server.stop());
    await server.set(NODE, 'v1', [config(100)]);
    const tollgate = await spawnTollgate(
      'unused: true',
      { ...xdsEnv(server, NODE), XDS_REFUSE_EMPTY_UPDATE: 'true' },
      { captureStdout: true },
    );
    cleanup.push(() => tollgate.stop());
    await server.waitFor(acked('v1'));
    await server.set(NODE, 'empty-2', []);
    const nack = await server.waitFor(
      (e) => isRequest(e) && e.kind === 'nack' && e.responseNonce !== '',
    );
    expect(isRequest(nack) && nack.errorDetail?.message).toBe(
      'the update has no rules, and would remove all 1 domains in force ' +
        '(XDS_REFUSE_EMPTY_UPDATE=true refuses it)',
    );
    expect(server.events.some(acked('empty-2'))).toBe(false);
    expect(await limitNow(tollgate)).toBe(100);
    // An update with rules is taken as ever.
    await server.set(NODE, 'v3', [config(30)]);
    await server.waitFor(acked('v3'));
    expect(await limitNow(tollgate)).toBe(30);
  });

  it('never takes an update over XDS_CLIENT_MAX_MSG_SIZE_IN_BYTES, and keeps its rules', async () => {
    const [server, tollgate] = await setup({ XDS_CLIENT_MAX_MSG_SIZE_IN_BYTES: '65536' });
    await server.set(NODE, 'big', [config(50, 5_000)]);
    // The stream fails on the oversized message, and each new stream gets it again.
    await server.waitFor((e) => e.event === 'stream-closed', 15_000);
    expect(await limitNow(tollgate)).toBe(100);
    expect(server.events.some(acked('big'))).toBe(false);
    await server.set(NODE, 'v3', [config(30)]);
    await server.waitFor(acked('v3'), 15_000);
    expect(await limitNow(tollgate)).toBe(30);
  }, 60_000);

  it('with WORKERS=2, keeps one stream per worker, and each applies and ACKs every version', async () => {
    const redis = await startRedis();
    cleanup.push(() => redis.stop());
    const [server, tollgate] = await setup({ WORKERS: '2', REDIS_URL: redis.url });
    const count = (version: string) => server.events.filter(acked(version)).length;
    await expect.poll(() => count('v1'), { timeout: 15_000 }).toBe(2);
    const initials = server.events.filter((e) => e.event === 'request' && e.kind === 'initial');
    expect(new Set(initials.map((e) => e.event === 'request' && e.stream)).size).toBe(2);
    await server.set(NODE, 'v2', [config(40)]);
    await expect.poll(() => count('v2'), { timeout: 15_000 }).toBe(2);
    expect(await limitNow(tollgate)).toBe(40);
  }, 60_000);
});
