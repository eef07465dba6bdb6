import { spawn } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { counterByLabel } from '../support/metrics.js';
import { spawnTollgate, type TollgateProcess } from '../support/processes.js';
import { startRedis, type TestRedis } from '../support/redis.js';
import { callCheck, d } from '../support/tollgate.js';

// HTTP/2 rapid reset (CVE-2023-44487) from one address, reconnecting whenever a connection is
// closed: HEADERS and RST_STREAM for new streams, as fast as the sockets take them. nghttp2 ends
// each connection after 1,000 resets; the attacker's reconnects must be bounded too, while a
// well-behaved client on the same address (every test client is on 127.0.0.1) keeps its latency.

const RULES = `
domain: api
descriptors:
  - key: tenant
    rate_limit: {unit: hour, requests_per_unit: 4000000000}
`;
const CHECK_PATH = '/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit';
const HEALTH_PATH = '/grpc.health.v1.Health/Check';
const attacker = fileURLToPath(new URL('../support/rapidReset.mjs', import.meta.url));

interface AttackTotals {
  opened: number;
  refused: number;
  goaways: number;
  streams: number;
  goawayCodes: Record<string, number>;
}

/** Runs the attacker (a process of its own) to its end; its totals. */
function rapidReset(address: string, path: string, connections: number, seconds: number) {
  const port = address.split(':')[1] as string;
  const child = spawn(process.execPath, [
    attacker,
    port,
    path,
    String(connections),
    String(seconds),
  ]);
  let out = '';
  child.stdout.on('data', (chunk: Buffer) => (out += chunk.toString()));
  const killer = setTimeout(() => child.kill('SIGKILL'), (seconds + 20) * 1_000);
  return new Promise<AttackTotals>((resolve, reject) =>
    child.once('exit', (code) => {
      clearTimeout(killer);
      if (code === 0) resolve(JSON.parse(out) as AttackTotals);
      else reject(new Error(`the attacker exited ${code}`));
    }),
  );
}

/**
 * A check every 20 ms, whether the last one was answered or not, each timed until stopped: a
 * stall delays every check made during it, as it would Envoy's, rather than the next one only.
 */
function probeEvery20Ms(tollgate: TollgateProcess) {
  const latenciesMs: number[] = [];
  const calls: Promise<void>[] = [];
  let failed = 0;
  const timer = setInterval(() => {
    const started = performance.now();
    calls.push(
      callCheck(tollgate.client, { domain: 'api', descriptors: [d('tenant', 'probe')] }).then(
        () => void latenciesMs.push(performance.now() - started),
        () => void (failed += 1),
      ),
    );
  }, 20);
  return {
    async stop() {
      clearInterval(timer);
      await Promise.all(calls);
      return { calls: calls.length, failed, latenciesMs };
    },
  };
}

const median = (values: number[]) =>
  [...values].sort((a, b) => a - b)[Math.floor(values.length / 2)] ?? NaN;

let redis: TestRedis;
const running: TollgateProcess[] = [];

beforeAll(async () => {
  redis = await startRedis();
}, 60_000);

afterAll(async () => {
  await Promise.all(running.map((t) => t.stop()));
  await redis?.stop();
});

const bounds = (tollgate: TollgateProcess) =>
  counterByLabel(tollgate.httpUrl, 'tollgate_bounds_reached_total', 'bound');

describe('rapid reset from one address, with reconnects', () => {
  it.each([
    { target: 'the fast path (ShouldRateLimit)', path: CHECK_PATH },
    { target: 'grpc-js (health Check)', path: HEALTH_PATH },
  ])(
    'on $target: the attacker is closed and refused, a client on the same address keeps its latency',
    async ({ path }) => {
      // A generous REDIS_TIMEOUT: the attacker's own process shares the machine's cores.
      const tollgate = await spawnTollgate(RULES, { REDIS_URL: redis.url, REDIS_TIMEOUT: '250ms' });
      running.push(tollgate);
      // The probe's connection is open, and has served checks, before the attack starts.
      await callCheck(tollgate.client, { domain: 'api', descriptors: [d('tenant', 'probe')] });
      const quiet = probeEvery20Ms(tollgate);
      await new Promise((resolve) => setTimeout(resolve, 1_000));
      const baseline = await quiet.stop();

      const probe = probeEvery20Ms(tollgate);
      const totals = await rapidReset(tollgate.address, path, 4, 6);
      const during = await probe.stop();
      const counted = (await bounds(tollgate)).grpc_peer_resets;
      console.log(
        `[rapid reset] ${path}: probe p50 ${median(baseline.latenciesMs).toFixed(1)} ms before, ` +
          `${median(during.latenciesMs).toFixed(1)} ms during (${during.calls} calls, ${during.failed} failed, ` +
          `slowest ${Math.max(...during.latenciesMs).toFixed(0)} ms); attacker: ${JSON.stringify(totals)}; ` +
          `grpc_peer_resets ${counted}`,
      );
      expect(during.failed).toBe(0);
      // Before its budget is spent, the attacker slows every call for a moment; past it, calls
      // go at the machine's own pace. (Before the bound: p50 from 100 ms to 2 s, throughout.)
      expect(median(during.latenciesMs)).toBeLessThan(50 + median(baseline.latenciesMs));
      // Once its budget is spent, its connections are sent GOAWAY (ENHANCE_YOUR_CALM, unless
      // nghttp2's own came first) and closed, and its new ones refused as they are accepted.
      expect(totals.refused).toBeGreaterThan(10);
      expect(counted).toBeGreaterThanOrEqual(totals.refused);
    },
    60_000,
  );
});
