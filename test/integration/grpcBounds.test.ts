import http2 from 'node:http2';
import { connect as connectTcp } from 'node:net';
import v8 from 'node:v8';
import vm from 'node:vm';
import { afterAll, describe, expect, it } from 'vitest';
import { counterByLabel } from '../support/metrics.js';
import { rssMb, spawnTollgate, type TollgateProcess } from '../support/processes.js';
import { callCheck, d, eventually, startTollgate } from '../support/tollgate.js';

// What one hostile gRPC client can hold in the service is bounded: connections, calls, bytes of
// requests still arriving, and the time a call may stay open. Raw HTTP/2 clients open streams
// that send their headers and part of a message, then never finish, as a slow-loris would.

const RULES = `
domain: bounds
descriptors:
  - key: tenant
    rate_limit: {unit: hour, requests_per_unit: 4000000000}
`;
const PATH = '/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit';
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

/** An HTTP/2 connection that has exchanged its settings with the server, or closed. */
function open(address: string): Promise<http2.ClientHttp2Session> {
  const session = http2.connect(`http://${address}`);
  sessions.push(session);
  session.on('error', () => undefined);
  return new Promise((resolve) => {
    session.once('remoteSettings', () => resolve(session));
    session.once('close', () => resolve(session));
  });
}

/**
 * A call that sends its headers and 5 of the 100 bytes its message declares, then nothing more.
 * Resolves with the RST_STREAM code the server ends it with (0 for none), and when.
 */
function halfOpen(session: http2.ClientHttp2Session): Promise<{ code: number; atMs: number }> {
  const started = performance.now();
  const stream = session.request(
    { ':method': 'POST', ':path': PATH, 'content-type': 'application/grpc', te: 'trailers' },
    { endStream: false },
  );
  stream.on('error', () => undefined);
  stream.write(Buffer.from([0, 0, 0, 0, 100, 10, 3, 97, 112, 105]));
  return new Promise((resolve) =>
    stream.once('close', () =>
      resolve({ code: stream.rstCode ?? 0, atMs: performance.now() - started }),
    ),
  );
}

const bounds = (t: TollgateProcess) =>
  counterByLabel(t.httpUrl, 'tollgate_bounds_reached_total', 'bound');

const tally = (codes: number[]) =>
  codes.reduce<Record<number, number>>(
    (counts, code) => ({ ...counts, [code]: (counts[code] ?? 0) + 1 }),
    {},
  );

const { NGHTTP2_CANCEL, NGHTTP2_REFUSED_STREAM, NGHTTP2_ENHANCE_YOUR_CALM } = http2.constants;

describe('half-open calls', () => {
  it('are reset after GRPC_CALL_TIMEOUT, at most 100 a connection, in bounded memory', async () => {
    const tollgate = await spawn({ GRPC_CALL_TIMEOUT: '2s' });
    const pid = tollgate.child.pid as number;
    const before = rssMb(pid);
    const connections = await Promise.all(Array.from({ length: 20 }, () => open(tollgate.address)));
    for (const session of connections) {
      expect(session.remoteSettings.maxConcurrentStreams).toBe(100);
    }
    const calls = connections.flatMap((session) =>
      Array.from({ length: 100 }, () => halfOpen(session)),
    );
    await new Promise((resolve) => setTimeout(resolve, 1_000));
    const during = rssMb(pid);
    // 2,000 calls held open: a real call is still answered.
    const answer = await callCheck(tollgate.client, {
      domain: 'bounds',
      descriptors: [d('tenant', 'a')],
    });
    expect(answer.overall_code).toBe('OK');

    const ended = await Promise.all(calls);
    const slowest = Math.max(...ended.map((e) => e.atMs));
    console.log(
      `[bounds] 20 connections × 100 half-open calls: RSS ${before.toFixed(0)} → ${during.toFixed(0)} MB; ` +
        `all reset (${JSON.stringify(tally(ended.map((e) => e.code)))}) by ${slowest.toFixed(0)} ms`,
    );
    expect(ended.every((e) => e.code === NGHTTP2_CANCEL)).toBe(true);
    expect(Math.min(...ended.map((e) => e.atMs))).toBeGreaterThanOrEqual(1_900);
    expect(slowest).toBeLessThan(2_000 + 5_000);
    expect(during - before).toBeLessThan(150);
    expect((await bounds(tollgate)).grpc_call_timeout).toBe(2_000);
  });

  it('past GRPC_MAX_CALLS across connections are refused at once', async () => {
    const tollgate = await spawn({ GRPC_MAX_CALLS: '50', GRPC_CALL_TIMEOUT: '3s' });
    const connections = await Promise.all([open(tollgate.address), open(tollgate.address)]);
    const calls = connections.flatMap((session) =>
      Array.from({ length: 40 }, () => halfOpen(session)),
    );
    const ended = await Promise.all(calls);
    const codes = tally(ended.map((e) => e.code));
    console.log(`[bounds] 80 half-open calls with GRPC_MAX_CALLS=50: ${JSON.stringify(codes)}`);
    expect(codes).toEqual({ [NGHTTP2_REFUSED_STREAM]: 30, [NGHTTP2_CANCEL]: 50 });
    const refused = ended.filter((e) => e.code === NGHTTP2_REFUSED_STREAM);
    expect(Math.max(...refused.map((e) => e.atMs))).toBeLessThan(1_500);
    expect(await bounds(tollgate)).toMatchObject({ grpc_calls: 30, grpc_call_timeout: 50 });
  });

  it('past GRPC_MAX_RECEIVING_BYTES of requests still arriving are reset', async () => {
    const tollgate = await spawn({ GRPC_MAX_RECEIVING_BYTES: String(1024 * 1024) });
    const session = await open(tollgate.address);
    const stream = session.request(
      { ':method': 'POST', ':path': PATH, 'content-type': 'application/grpc', te: 'trailers' },
      { endStream: false },
    );
    stream.on('error', () => undefined);
    const closed = new Promise<number>((resolve) =>
      stream.once('close', () => resolve(stream.rstCode ?? 0)),
    );
    // A message of 3 MB declared, 64 KB at a time, never finished.
    stream.write(Buffer.from([0, 0, 0x30, 0, 0]));
    const chunk = Buffer.alloc(64 * 1024, 1);
    let sent = 0;
    while (sent < 2 * 1024 * 1024 && !stream.closed) {
      if (!stream.write(chunk))
        await new Promise((resolve) => stream.once('drain', resolve).once('close', resolve));
      sent += chunk.length;
    }
    expect(await closed).toBe(NGHTTP2_ENHANCE_YOUR_CALM);
    expect((await bounds(tollgate)).grpc_receiving_bytes).toBe(1);
    const answer = await callCheck(tollgate.client, {
      domain: 'bounds',
      descriptors: [d('tenant', 'a')],
    });
    expect(answer.overall_code).toBe('OK');
  });
});

describe('connections', () => {
  it('past GRPC_MAX_CONNECTIONS are closed as they are accepted', async () => {
    const tollgate = await spawn({ GRPC_MAX_CONNECTIONS: '20' });
    const sockets = Array.from({ length: 30 }, () =>
      connectTcp(Number(tollgate.address.split(':')[1]), '127.0.0.1'),
    );
    const closed = await Promise.all(
      sockets.map(
        (socket) =>
          new Promise<boolean>((resolve) => {
            socket.on('error', () => undefined);
            const timer = setTimeout(() => resolve(false), 2_000);
            socket.once('close', () => {
              clearTimeout(timer);
              resolve(true);
            });
          }),
      ),
    );
    // At most 20 held open, the rest closed at once. The test process's own gRPC channels, from
    // the health checks of start-up, may hold some of the 20 for a while.
    const refused = closed.filter(Boolean).length;
    expect(refused).toBeGreaterThanOrEqual(10);
    expect(refused).toBeLessThanOrEqual(20);
    expect((await bounds(tollgate)).grpc_connections).toBeGreaterThanOrEqual(refused);
    for (const socket of sockets) socket.destroy();
    // Once they are gone, a new client connects again.
    await eventually(async () => {
      const session = await open(tollgate.address);
      return !session.closed && !session.destroyed;
    });
  });

  it('with no call open for GRPC_MAX_CONNECTION_IDLE are sent GOAWAY and closed, whichever path served them', async () => {
    const tollgate = await spawn({ GRPC_MAX_CONNECTION_IDLE: '1s', GRPC_CALL_TIMEOUT: '6s' });
    const goneAt = (session: http2.ClientHttp2Session) =>
      new Promise<number>((resolve) => {
        if (session.closed || session.destroyed) return resolve(performance.now());
        session.once('close', () => resolve(performance.now()));
      });
    const started = performance.now();
    // 300 connections that send the preface and SETTINGS, then nothing.
    const idle = await Promise.all(Array.from({ length: 300 }, () => open(tollgate.address)));
    const idleGone = Promise.all(idle.map(goneAt));
    // One that makes a fast-path call every 200 ms, one a grpc-js call (health), and one that
    // holds a call open without sending anything more: none of them is idle.
    const [busyFast, busyHealth, holding] = await Promise.all(
      [0, 1, 2].map(() => open(tollgate.address)),
    );
    const held = halfOpen(holding!);
    const unary = (session: http2.ClientHttp2Session, path: string, body: Buffer) =>
      new Promise<void>((resolve) => {
        const stream = session.request(
          { ':method': 'POST', ':path': path, 'content-type': 'application/grpc', te: 'trailers' },
          { endStream: false },
        );
        stream.on('error', () => undefined);
        stream.resume();
        stream.once('close', () => resolve());
        stream.end(body);
      });
    // A check of an empty request (INVALID_ARGUMENT: a call all the same), and HealthCheckRequest{}.
    const emptyFrame = Buffer.from([0, 0, 0, 0, 0]);
    let busy = true;
    const traffic = (async () => {
      while (busy) {
        await Promise.all([
          unary(busyFast!, PATH, emptyFrame),
          unary(busyHealth!, '/grpc.health.v1.Health/Check', emptyFrame),
        ]);
        await new Promise((resolve) => setTimeout(resolve, 200));
      }
    })();

    const closedAt = await idleGone;
    for (const at of closedAt) {
      expect(at - started).toBeGreaterThanOrEqual(900);
      expect(at - started).toBeLessThan(5_000);
    }
    expect((await bounds(tollgate)).grpc_connection_idle).toBeGreaterThanOrEqual(300);
    expect([busyFast, busyHealth, holding].map((s) => s!.closed || s!.destroyed)).toEqual([
      false,
      false,
      false,
    ]);
    busy = false;
    await traffic;
    // Once their calls are over, they go too: the held call at GRPC_CALL_TIMEOUT (6 s).
    const rest = await Promise.all([busyFast, busyHealth, holding].map((s) => goneAt(s!)));
    expect((await held).code).toBe(http2.constants.NGHTTP2_CANCEL);
    expect(rest.every((at) => at - started < 12_000)).toBe(true);
  });

  it('leave nothing behind once closed: 10,000 of them grow the heap by less than 80 bytes each', async () => {
    v8.setFlagsFromString('--expose-gc');
    const gc = vm.runInNewContext('gc') as () => void;
    const heap = async () => {
      for (let i = 0; i < 4; i++) {
        gc();
        await new Promise((resolve) => setTimeout(resolve, 50));
      }
      return process.memoryUsage().heapUsed;
    };
    // In this process, to read its heap; the maximum connection age is the default, 24 hours.
    const tollgate = await startTollgate({ rules: RULES });
    try {
      const connectAndClose = () =>
        new Promise<void>((resolve) => {
          const session = http2.connect(`http://${tollgate.address}`);
          session.on('error', () => undefined);
          session.once('remoteSettings', () => session.close());
          session.once('close', () => resolve());
        });
      const batch = async (count: number) => {
        for (let i = 0; i < count; i += 50)
          await Promise.all(Array.from({ length: 50 }, connectAndClose));
      };
      await batch(2_000);
      const before = await heap();
      await batch(10_000);
      const after = await heap();
      const perConnection = (after - before) / 10_000;
      console.log(
        `[bounds] 10,000 closed connections: heap ${(before / 1e6).toFixed(2)} → ${(after / 1e6).toFixed(2)} MB, ${perConnection.toFixed(0)} bytes each`,
      );
      expect(perConnection).toBeLessThan(80);
    } finally {
      await tollgate.stop();
    }
  }, 120_000);
});
