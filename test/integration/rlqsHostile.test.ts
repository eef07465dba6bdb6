import http2 from 'node:http2';
import { setTimeout as sleep } from 'node:timers/promises';
import type * as protoLoader from '@grpc/proto-loader';
import { afterAll, describe, expect, it } from 'vitest';
import { packageDefinition, rlqsServiceName } from '../../src/core/protos.js';
import { counterByLabel } from '../support/metrics.js';
import { rssMb, spawnTollgate, type TollgateProcess } from '../support/processes.js';
import { grpcFrame } from '../support/rawGrpc.js';
import { openRlqs, usageReport } from '../support/rlqsClient.js';
import { callCheck, d } from '../support/tollgate.js';

// What one hostile RLQS client can hold in the service, and for how long: a stream whose client
// never reads (its HTTP/2 flow-control window 0) while it sends large reports, streams that hold
// an unfinished message each, and a stream that never reads at shutdown. Raw HTTP/2 clients play
// them, against the service in a process of its own.

const RULES = `
domain: hostile
descriptors:
  - key: tenant
    rate_limit: {unit: hour, requests_per_unit: 4000000000}
`;
const PATH = `/${rlqsServiceName}/StreamRateLimitQuotas`;
const { NGHTTP2_ENHANCE_YOUR_CALM } = http2.constants;
const running: TollgateProcess[] = [];
const sessions: http2.ClientHttp2Session[] = [];

afterAll(async () => {
  for (const session of sessions) session.destroy();
  await Promise.all(running.map((t) => t.stop()));
});

async function spawn(env: Record<string, string>): Promise<TollgateProcess> {
  const tollgate = await spawnTollgate(RULES, env);
  running.push(tollgate);
  return tollgate;
}

/** A connection that has exchanged its settings; `initialWindowSize: 0` reads nothing. */
function connect(
  address: string,
  settings: http2.Settings = {},
): Promise<http2.ClientHttp2Session> {
  // The reports wait in this process when the service reads slower than they are written.
  const session = http2.connect(`http://${address}`, { settings, maxSessionMemory: 1_000 });
  sessions.push(session);
  session.on('error', () => undefined);
  return new Promise((resolve) => session.once('remoteSettings', () => resolve(session)));
}

function openStream(session: http2.ClientHttp2Session): http2.ClientHttp2Stream {
  const stream = session.request(
    { ':method': 'POST', ':path': PATH, 'content-type': 'application/grpc', te: 'trailers' },
    { endStream: false },
  );
  stream.on('error', () => undefined);
  return stream;
}

const encodeReport = (packageDefinition[rlqsServiceName] as protoLoader.ServiceDefinition)
  .StreamRateLimitQuotas!.requestSerialize;

/**
 * A report within every RLQS bound, of about 3.7 MB: 1,000 buckets (RLQS_MAX_BUCKETS_PER_STREAM),
 * each of 4 entries of 900 bytes, on a domain without rules, so that each is answered ALLOW_ALL
 * with its id echoed.
 */
function largeReport(): Buffer {
  const filler = 'x'.repeat(890);
  const usages = Array.from({ length: 1_000 }, (_, i) => ({
    bucket_id: {
      bucket: Object.fromEntries([0, 1, 2, 3].map((k) => [`k${k}-${i}`.padEnd(10, '_'), filler])),
    },
    time_elapsed: { seconds: 1 },
    num_requests_allowed: 1,
  }));
  return grpcFrame(encodeReport({ domain: 'unruled', bucket_quota_usages: usages }));
}

const bounds = (t: TollgateProcess) =>
  counterByLabel(t.httpUrl, 'tollgate_bounds_reached_total', 'bound');

describe('an RLQS client that never reads', () => {
  it('holds at most RLQS_MAX_QUEUED_BYTES of answers a stream, which is then reset', async () => {
    const tollgate = await spawn({});
    const pid = tollgate.child.pid as number;
    const before = rssMb(pid);
    const session = await connect(tollgate.address, { initialWindowSize: 0 });
    const report = largeReport();
    let peak = before;
    const resets: number[] = [];
    const checks: Promise<string | undefined>[] = [];
    const until = performance.now() + 10_000;
    // 20 reports a second (RLQS_MAX_REPORTS_PER_SECOND), each stream opened again once reset,
    // as Envoy would; a check beside it every 250 ms.
    while (performance.now() < until) {
      const stream = openStream(session);
      while (!stream.closed && performance.now() < until) {
        stream.write(report);
        await sleep(50);
        peak = Math.max(peak, rssMb(pid));
        if (checks.length < (10_000 - (until - performance.now())) / 250) {
          const request = { domain: 'hostile', descriptors: [d('tenant', 'beside')] };
          checks.push(callCheck(tollgate.client, request, 5_000).then((r) => r.overall_code));
        }
      }
      if (stream.closed) resets.push(stream.rstCode ?? 0);
      else stream.close(http2.constants.NGHTTP2_CANCEL);
    }
    const answered = await Promise.all(checks);
    const counted = (await bounds(tollgate)).rlqs_queued_bytes ?? 0;
    console.log(
      `[rlqs] 10 s of 3.7 MB reports, 20 a second, never read: RSS ${before.toFixed(0)} → peak ` +
        `${peak.toFixed(0)} MB; ${resets.length} streams reset (${resets.join(', ')}); ` +
        `${counted} counted as rlqs_queued_bytes; ${answered.length} checks beside it`,
    );
    expect(peak - before).toBeLessThan(400);
    expect(resets.length).toBeGreaterThanOrEqual(2);
    expect(resets.every((code) => code === NGHTTP2_ENHANCE_YOUR_CALM)).toBe(true);
    expect(counted).toBeGreaterThanOrEqual(resets.length);
    expect(answered.length).toBeGreaterThan(20);
    expect(answered.every((code) => code === 'OK')).toBe(true);
  }, 30_000);
});

describe('RLQS streams that hold an unfinished message each', () => {
  it('count in GRPC_MAX_RECEIVING_BYTES: past it, they are reset', async () => {
    const tollgate = await spawn({ GRPC_MAX_RECEIVING_BYTES: String(16 * 1024 * 1024) });
    const pid = tollgate.child.pid as number;
    const before = rssMb(pid);
    // 80 streams on 16 connections, each sending 3 MB of a 4 MB message, then nothing.
    const prefix = Buffer.from([0, 0, 0, 0, 0]);
    prefix.writeUInt32BE(4_000_000, 1);
    const chunk = Buffer.alloc(64 * 1024, 0x0a);
    const connections = await Promise.all(
      Array.from({ length: 16 }, () => connect(tollgate.address)),
    );
    const streams = connections.flatMap((session) =>
      Array.from({ length: 5 }, () => openStream(session)),
    );
    await Promise.all(
      streams.map(async (stream) => {
        await new Promise((resolve) => stream.write(prefix, resolve));
        for (let sent = 0; sent < 3_000_000 && !stream.closed; sent += chunk.length) {
          await new Promise((resolve) => stream.write(chunk, resolve));
        }
      }),
    );
    await sleep(500);
    const during = rssMb(pid);
    const reset = streams.filter((s) => s.rstCode === NGHTTP2_ENHANCE_YOUR_CALM).length;
    const open = streams.filter((s) => !s.closed).length;
    // A stream with a whole report is still answered beside them.
    const rlqs = openRlqs(tollgate.address);
    rlqs.stream.write(usageReport({ tenant: 'beside' }, 1, 'hostile'));
    const answer = await rlqs.next();
    rlqs.close();
    const counted = (await bounds(tollgate)).grpc_receiving_bytes ?? 0;
    console.log(
      `[rlqs] 80 streams × 3 MB of a 4 MB message, GRPC_MAX_RECEIVING_BYTES=16 MiB: ` +
        `RSS ${before.toFixed(0)} → ${during.toFixed(0)} MB; ${open} held, ${reset} reset; ` +
        `${counted} counted as grpc_receiving_bytes`,
    );
    expect(open).toBeLessThanOrEqual(5);
    expect(reset).toBe(80 - open);
    expect(counted).toBe(reset);
    expect(during - before).toBeLessThan(150);
    expect(answer).toHaveProperty('bucket_action');
  }, 30_000);
});

describe('SIGTERM with an RLQS stream that never reads', () => {
  it('exits within the drain, not SHUTDOWN_GRACE', async () => {
    const tollgate = await spawn({ SHUTDOWN_GRACE: '10s' });
    const session = await connect(tollgate.address, { initialWindowSize: 0 });
    const stream = openStream(session);
    const answering = new Promise((resolve) => stream.once('response', resolve));
    stream.write(grpcFrame(encodeReport(usageReport({ tenant: 'a' }, 1, 'hostile'))));
    // The answer's headers came; its message waits for a window that never opens.
    await answering;
    await sleep(200);
    const started = performance.now();
    const exit = new Promise<number | null>((resolve) => tollgate.child.once('exit', resolve));
    tollgate.child.kill('SIGTERM');
    const code = await exit;
    const tookMs = performance.now() - started;
    console.log(
      `[rlqs] SIGTERM with a stream that never reads: exit ${code} in ${tookMs.toFixed(0)} ms`,
    );
    expect(code).toBe(0);
    expect(tookMs).toBeLessThan(3_000);
  }, 30_000);
});
