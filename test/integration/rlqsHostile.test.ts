import http2 from 'node:http2';
import { setTimeout as sleep } from 'node:timers/promises';
import type * as protoLoader from '@grpc/proto-loader';
import { afterAll, describe, expect, it } from 'vitest';
import { packageDefinition, rlqsServiceName } from '../../src/core/protos.js';
import { counterByLabel, metricValue } from '../support/metrics.js';
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
const { NGHTTP2_ENHANCE_YOUR_CALM, NGHTTP2_CANCEL } = http2.constants;
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

/** A stream's grpc-status and grpc-message once it has them, from its trailers or a trailers-only answer. */
function statusOf(stream: http2.ClientHttp2Stream): { status?: string; message?: string } {
  const seen: { status?: string; message?: string } = {};
  const take = (headers: http2.IncomingHttpHeaders) => {
    if (headers['grpc-status'] === undefined) return;
    seen.status = String(headers['grpc-status']);
    seen.message = decodeURIComponent(String(headers['grpc-message'] ?? ''));
  };
  stream.on('response', take);
  stream.on('trailers', take);
  return seen;
}

async function metrics(t: TollgateProcess): Promise<string> {
  return (await fetch(`${t.httpUrl}/metrics`)).text();
}

describe('RLQS streams that never read, each under RLQS_MAX_QUEUED_BYTES', () => {
  it('hold RLQS_MAX_QUEUED_BYTES_TOTAL at most: a stream whose answer would pass it ends, naming it', async () => {
    const total = 16 * 1024 * 1024;
    const tollgate = await spawn({ RLQS_MAX_QUEUED_BYTES_TOTAL: String(total) });
    const pid = tollgate.child.pid as number;
    const before = rssMb(pid);
    let peak = before;
    const connections = await Promise.all(
      Array.from({ length: 4 }, () => connect(tollgate.address, { initialWindowSize: 0 })),
    );
    const streams = connections.flatMap((session) =>
      Array.from({ length: 5 }, () => openStream(session)),
    );
    const statuses = streams.map(statusOf);
    const checks: Promise<string | undefined>[] = [];
    const beside = () => {
      const request = { domain: 'hostile', descriptors: [d('tenant', 'beside')] };
      checks.push(callCheck(tollgate.client, request, 5_000).then((r) => r.overall_code));
    };
    // Until `reports` are answered or refused, with a check beside every 250 ms.
    const settle = async (reports: number) => {
      for (let n = 0; n < 120; n++) {
        await sleep(250);
        peak = Math.max(peak, rssMb(pid));
        beside();
        const text = await metrics(tollgate);
        const answered = metricValue(text, 'tollgate_rlqs_reports_total') ?? 0;
        const refused = Object.values(await bounds(tollgate)).reduce((a, b) => a + b, 0);
        if (answered + refused >= reports) return;
      }
    };
    const report = largeReport();
    // One report a stream, each answered with about 3.7 MB: 4 answers fit in 16 MiB; the 16
    // streams whose answers would pass it have nothing of their own queued, so their status goes
    // at once, though they never read.
    for (const stream of streams) stream.write(report);
    await settle(streams.length);
    // The refused streams' statuses on their way to this client.
    const refusedNow = (await bounds(tollgate)).rlqs_queued_bytes_total ?? 0;
    for (let n = 0; n < 50 && statuses.filter((s) => s.status).length < refusedNow; n++) {
      await sleep(100);
    }
    const kept = streams.filter((_, n) => statuses[n]!.status === undefined);
    const named = statuses.filter((s) => s.status === String(8));
    // A second report on two of the streams kept: its answer would pass the budget too, so each
    // ends with its first answer queued before its status, and is reset a second later.
    const adding = kept.slice(0, 2);
    for (const stream of adding) stream.write(report);
    await settle(streams.length + adding.length);
    for (let n = 0; n < 40 && adding.some((s) => !s.closed); n++) await sleep(250);
    beside();
    const answered = await Promise.all(checks);
    const counted = Object.fromEntries(
      Object.entries(await bounds(tollgate)).filter(([, n]) => n > 0),
    );
    console.log(
      `[rlqs] 20 streams that never read, 3.7 MB answers, RLQS_MAX_QUEUED_BYTES_TOTAL=16 MiB: ` +
        `${kept.length} kept, ${named.length} ended at once, then ${adding.length} of them adding; ` +
        `RSS ${before.toFixed(0)} → peak ${peak.toFixed(0)} MB; bounds ${JSON.stringify(counted)}; ` +
        `${answered.length} checks beside`,
    );
    expect(kept.length).toBe(4);
    expect(named.length).toBe(16);
    for (const status of named) {
      expect(status.message).toBe(
        `more than ${total} bytes of answers wait for their clients across RLQS streams, RLQS_MAX_QUEUED_BYTES_TOTAL`,
      );
    }
    expect(adding.map((s) => s.rstCode)).toEqual([
      NGHTTP2_ENHANCE_YOUR_CALM,
      NGHTTP2_ENHANCE_YOUR_CALM,
    ]);
    expect(kept.slice(2).every((s) => !s.closed)).toBe(true);
    expect(counted).toEqual({ rlqs_queued_bytes_total: 18 });
    expect(peak - before).toBeLessThan(350);
    expect(answered.every((code) => code === 'OK')).toBe(true);
  }, 60_000);
});

describe('an RLQS client that stops reading with a small queue', () => {
  it('is ended after RLQS_UNREAD_TIMEOUT, naming it, while a client that reads is not', async () => {
    const tollgate = await spawn({ RLQS_UNREAD_TIMEOUT: '2s' });
    const session = await connect(tollgate.address, { initialWindowSize: 0 });
    const silent = openStream(session);
    const status = statusOf(silent);
    silent.resume();
    const reading = openRlqs(tollgate.address);
    const started = performance.now();
    silent.write(grpcFrame(encodeReport(usageReport({ tenant: 'silent' }, 1, 'hostile'))));
    // The reading client reports every 250 ms meanwhile, and takes each answer.
    let answers = 0;
    let unread = 0;
    for (let n = 0; n < 60 && unread === 0; n++) {
      reading.stream.write(usageReport({ tenant: 'reading' }, 1, n === 0 ? 'hostile' : undefined));
      await reading.next();
      answers += 1;
      await sleep(250);
      unread = (await bounds(tollgate)).rlqs_unread ?? 0;
    }
    const endedMs = performance.now() - started;
    // The silent client reads again within the second before its stream is reset: it gets its
    // answer, then the status.
    session.settings({ initialWindowSize: 1 << 20 });
    await new Promise((resolve) => silent.once('close', resolve));
    const readingOpen = !reading.stream.destroyed;
    reading.stream.write(usageReport({ tenant: 'reading' }, 1));
    const after = await reading.next();
    reading.close();
    console.log(
      `[rlqs] a stream that stops reading, RLQS_UNREAD_TIMEOUT=2s: ended after ${endedMs.toFixed(0)} ms ` +
        `(${JSON.stringify(status)}); ${answers} answers to a client reading beside it`,
    );
    expect(unread).toBe(1);
    expect(endedMs).toBeGreaterThan(1_900);
    expect(endedMs).toBeLessThan(10_000);
    expect(status).toEqual({
      status: String(1),
      message: 'an answer waited 2000 ms for the client to read it, RLQS_UNREAD_TIMEOUT',
    });
    expect(silent.rstCode === 0 || silent.rstCode === NGHTTP2_CANCEL).toBe(true);
    expect(readingOpen).toBe(true);
    expect(after).toHaveProperty('bucket_action');
  }, 30_000);
});
