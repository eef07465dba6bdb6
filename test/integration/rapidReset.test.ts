import { spawn } from 'node:child_process';
import { connect as connectTcp } from 'node:net';
import { fileURLToPath } from 'node:url';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { counterByLabel } from '../support/metrics.js';
import { spawnTollgate, type TollgateProcess } from '../support/processes.js';
import { startRedis, type TestRedis } from '../support/redis.js';
import { callCheck, d } from '../support/tollgate.js';
import { frame, grpcHeaderBlock, PREFACE } from '../support/http2Frames.mjs';
import { connect, grpcFrame, rawCall } from '../support/rawGrpc.js';

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

/** An HTTP/2 frame: type, flags, stream id and payload. */
const CHECK_HEADERS = grpcHeaderBlock(CHECK_PATH);

/**
 * A connection that makes `calls` calls one after the other, each cancelled (RST_STREAM CANCEL)
 * 2 ms after it sent its headers and part of its message, before any answer: as Envoy cancels a
 * check whose timeout passed. (Node's client would half-close the stream before its reset.)
 * Resolves with whether the server closed the connection.
 */
function cancellingConnection(address: string, calls: number): Promise<boolean> {
  const socket = connectTcp(Number(address.split(':')[1]), '127.0.0.1');
  socket.on('error', () => undefined);
  socket.resume();
  let closed = false;
  socket.once('close', () => (closed = true));
  return new Promise((resolve) => {
    socket.once('connect', async () => {
      socket.write(PREFACE);
      socket.write(frame(4, 0, 0, Buffer.alloc(0)));
      for (let i = 0, id = 1; i < calls && !closed; i++, id += 2) {
        socket.write(frame(1, 0x4, id, CHECK_HEADERS));
        socket.write(frame(0, 0, id, Buffer.from([0, 0, 0, 0, 10, 10, 3])));
        await new Promise((r) => setTimeout(r, 2));
        socket.write(frame(3, 0, id, Buffer.from([0, 0, 0, 8])));
      }
      await new Promise((r) => setTimeout(r, 200));
      resolve(closed);
      socket.destroy();
    });
  });
}

describe('resets that a client such as Envoy makes', () => {
  it.each<{ budget: string; env: Record<string, string>; closes: boolean }>([
    { budget: 'the default', env: {}, closes: false },
    { budget: 'GRPC_MAX_PEER_RESETS=500', env: { GRPC_MAX_PEER_RESETS: '500' }, closes: true },
  ])(
    '800 calls cancelled before their answer, from 20 connections of one address, with $budget',
    async ({ env, closes }) => {
      const tollgate = await spawnTollgate(RULES, env);
      running.push(tollgate);
      const started = performance.now();
      const closed = await Promise.all(
        Array.from({ length: 20 }, () => cancellingConnection(tollgate.address, 40)),
      );
      const counted = (await bounds(tollgate)).grpc_peer_resets;
      const ms = performance.now() - started;
      console.log(
        `[rapid reset] 800 cancels from 20 connections in ${ms.toFixed(0)} ms, ${JSON.stringify(env)}: ` +
          `${closed.filter(Boolean).length} connections closed; grpc_peer_resets ${counted}`,
      );
      if (closes) {
        expect(closed.filter(Boolean).length).toBeGreaterThan(0);
        expect(counted).toBeGreaterThan(0);
      } else {
        // Within the budget: nothing closed, nothing counted, and the address is still served.
        expect(closed.filter(Boolean)).toEqual([]);
        expect(counted).toBe(0);
        const fresh = await connect(tollgate.address);
        const outcome = await rawCall(fresh, HEALTH_PATH, { chunks: [grpcFrame(Buffer.alloc(0))] });
        fresh.destroy();
        expect(outcome.trailers?.['grpc-status'] ?? outcome.headers?.['grpc-status']).toBe('0');
      }
    },
    60_000,
  );
});
