import type http2 from 'node:http2';
import { setTimeout as sleep } from 'node:timers/promises';
import zlib from 'node:zlib';
import fc from 'fast-check';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { loadProtoRoot } from '../../src/core/protos.js';
import { SHOULD_RATE_LIMIT_PATH } from '../../src/servers/grpc/fastPath.js';
import { startGrpcReceiver } from '../support/otlpReceiver.js';
import { connect, grpcFrame, rawCall, type RawCall, type RawOutcome } from '../support/rawGrpc.js';
import { startRedis, type TestRedis } from '../support/redis.js';
import { startTollgate, type Tollgate } from '../support/tollgate.js';

// The fast path's contract is grpc-js's: the same bytes in give the same `:status`, headers
// (apart from `date`), trailers and reply bytes out. Each case goes to two copies of the real
// service on one real Redis, one with the fast path (the default) and one with
// GRPC_FAST_PATH=false, so that grpc-js serves ShouldRateLimit there. Their counters are apart
// (CACHE_KEY_PREFIX) and their clocks stand still, so their answers can be compared byte for byte.

const RULES = `domain: conf
descriptors:
  - key: k
    rate_limit: {unit: hour, requests_per_unit: 3}
  - key: tenant
    descriptors:
      - key: route
        rate_limit: {unit: minute, requests_per_unit: 2}
`;
const Request = loadProtoRoot('strings').lookupType('envoy.service.ratelimit.v3.RateLimitRequest');
const encode = (request: object): Buffer => Buffer.from(Request.encode(request).finish());
const CHECK = encode({
  domain: 'conf',
  descriptors: [{ entries: [{ key: 'k', value: 'plain' }] }],
});
let fresh = 0;
/** A check of a counter no call has touched, so that its decision goes to the store. */
const freshCheck = (): Buffer =>
  encode({ domain: 'conf', descriptors: [{ entries: [{ key: 'k', value: `fresh-${++fresh}` }] }] });

interface Pair {
  fast: Tollgate;
  grpcJs: Tollgate;
  sessions: { fast: http2.ClientHttp2Session; grpcJs: http2.ClientHttp2Session };
  /** Sends the same call to both at once; resolves with both outcomes. */
  send(call: RawCall): Promise<{ fast: RawOutcome; grpcJs: RawOutcome }>;
  stop(): Promise<void>;
}

let pairs = 0;

async function startPair(redis: TestRedis, env: Record<string, string> = {}): Promise<Pair> {
  const name = `p${++pairs}`;
  const start = (fastPath: boolean, prefix: string) =>
    startTollgate({
      rules: RULES,
      redisUrl: redis.url,
      env: { GRPC_FAST_PATH: String(fastPath), CACHE_KEY_PREFIX: prefix, ...env },
    });
  const [fast, grpcJs] = await Promise.all([
    start(true, `${name}-fast`),
    start(false, `${name}-grpcjs`),
  ]);
  const sessions = { fast: await connect(fast.address), grpcJs: await connect(grpcJs.address) };
  return {
    fast,
    grpcJs,
    sessions,
    send: async (call) => {
      const [a, b] = await Promise.all([
        rawCall(sessions.fast, SHOULD_RATE_LIMIT_PATH, call),
        rawCall(sessions.grpcJs, SHOULD_RATE_LIMIT_PATH, call),
      ]);
      return { fast: a, grpcJs: b };
    },
    stop: async () => {
      sessions.fast.close();
      sessions.grpcJs.close();
      await Promise.all([fast.stop(), grpcJs.stop()]);
    },
  };
}

/** The gRPC status of an outcome, from a Trailers-Only answer or from the trailers. */
const grpcStatus = (outcome: RawOutcome): string | undefined => {
  const value = (outcome.trailers ?? outcome.headers)?.['grpc-status'];
  return value === undefined ? undefined : String(value);
};
const grpcMessage = (outcome: RawOutcome): string =>
  decodeURIComponent(String((outcome.trailers ?? outcome.headers)?.['grpc-message'] ?? ''));

let redis: TestRedis;
let pair: Pair;

beforeAll(async () => {
  redis = await startRedis();
  pair = await startPair(redis);
});
afterAll(async () => {
  await pair?.stop();
  await redis?.stop();
});

/** Sends the call to both, asserts the same outcome, and returns it for the case's own checks. */
async function same(call: RawCall): Promise<RawOutcome> {
  const { fast, grpcJs } = await pair.send(call);
  expect(fast).toEqual(grpcJs);
  return fast;
}

describe('the fast path answers as grpc-js does', () => {
  describe('deadlines', () => {
    it.each(['5H', '90M', '30S', '20000m', '20000000u'].map((t) => [t]))(
      'grpc-timeout %s is a deadline the call meets',
      async (timeout) => {
        const outcome = await same({
          headers: { 'grpc-timeout': timeout },
          chunks: [grpcFrame(CHECK)],
        });
        expect(grpcStatus(outcome)).toBe('0');
        expect(outcome.headers?.[':status']).toBe(200);
        expect(outcome.headers?.['content-type']).toBe('application/grpc+proto');
      },
    );

    it.each([['0m'], ['0S'], ['1n'], ['900u']])(
      'grpc-timeout %s has passed before the request arrives: DEADLINE_EXCEEDED',
      async (timeout) => {
        const outcome = await same({
          headers: { 'grpc-timeout': timeout },
          pauseMs: 50,
          chunks: [grpcFrame(CHECK)],
        });
        expect(grpcStatus(outcome)).toBe('4');
        expect(grpcMessage(outcome)).toBe('Deadline exceeded');
      },
    );

    it.each([['soon'], ['S5'], ['-'], ['']])(
      'grpc-timeout %j does not parse: INTERNAL, naming it',
      async (timeout) => {
        const outcome = await same({
          headers: { 'grpc-timeout': timeout },
          chunks: [grpcFrame(CHECK)],
        });
        expect(grpcStatus(outcome)).toBe('13');
        expect(grpcMessage(outcome)).toBe(`Invalid grpc-timeout value "${timeout}"`);
      },
    );

    it('a deadline that passes while the store decides ends the call with DEADLINE_EXCEEDED', async () => {
      const { outcome, elapsedMs } = await whileRedisSleeps(800, () =>
        same({ headers: { 'grpc-timeout': '200m' }, chunks: [grpcFrame(freshCheck())] }),
      );
      expect(grpcStatus(outcome)).toBe('4');
      expect(outcome.body).toBe('');
      // The deadline, not the store's timeout (1 s here) nor the sleep, ended it.
      expect(elapsedMs).toBeLessThan(700);
    });
  });

  describe('known differences, where the gRPC protocol spec overrules grpc-js', () => {
    // PROTOCOL-HTTP2.md: `Timeout → "grpc-timeout" TimeoutValue TimeoutUnit`, and
    // `TimeoutValue → {positive integer as ASCII string of at most 8 digits}`. 720H is 30 days.
    // grpc-js wraps its milliseconds to 32 bits, a negative number, and so ends the call at once;
    // the fast path keeps the deadline, past what a Node timer holds (GRPC_CALL_TIMEOUT still
    // bounds every call).
    it('a grpc-timeout of 720H is 30 days, not an expired deadline', async () => {
      const { fast, grpcJs } = await pair.send({
        headers: { 'grpc-timeout': '720H' },
        pauseMs: 50,
        chunks: [grpcFrame(CHECK)],
      });
      expect(grpcStatus(fast)).toBe('0');
      expect(grpcStatus(grpcJs)).toBe('4');
    });
  });

  describe('compression', () => {
    const compressed = (encoding: 'gzip' | 'deflate', message: Buffer) =>
      grpcFrame(encoding === 'gzip' ? zlib.gzipSync(message) : zlib.deflateSync(message), true);

    it.each([['gzip'], ['deflate']] as const)(
      'a message compressed with %s is decided',
      async (encoding) => {
        const outcome = await same({
          headers: { 'grpc-encoding': encoding },
          chunks: [compressed(encoding, CHECK)],
        });
        expect(grpcStatus(outcome)).toBe('0');
        expect(outcome.body).not.toBe('');
      },
    );

    it('identity, said or not, and a message not flagged compressed under gzip', async () => {
      for (const headers of [{ 'grpc-encoding': 'identity' }, {}, { 'grpc-encoding': 'gzip' }]) {
        expect(grpcStatus(await same({ headers, chunks: [grpcFrame(CHECK)] }))).toBe('0');
      }
    });

    it('an unknown encoding is UNIMPLEMENTED, naming it', async () => {
      const outcome = await same({
        headers: { 'grpc-encoding': 'snappy' },
        chunks: [grpcFrame(CHECK, true)],
      });
      expect(grpcStatus(outcome)).toBe('12');
      expect(grpcMessage(outcome)).toBe(
        'Received message compressed with unsupported encoding "snappy"',
      );
    });

    it('a compressed flag without an encoding reads the bytes as they are', async () => {
      const gzipped = await same({ chunks: [compressed('gzip', CHECK)] });
      expect(grpcStatus(gzipped)).toBe('3');
      const plain = await same({ chunks: [grpcFrame(CHECK, true)] });
      expect(grpcStatus(plain)).toBe('0');
    });

    it('bytes that do not inflate are INTERNAL', async () => {
      const outcome = await same({
        headers: { 'grpc-encoding': 'gzip' },
        chunks: [grpcFrame(Buffer.from('not gzip at all'), true)],
      });
      expect(grpcStatus(outcome)).toBe('13');
      expect(grpcMessage(outcome)).toBe('Failed to decompress message');
    });

    it('a message that inflates past the receive limit is RESOURCE_EXHAUSTED', async () => {
      const bomb = zlib.gzipSync(Buffer.alloc(5 * 1024 * 1024));
      const outcome = await same({
        headers: { 'grpc-encoding': 'gzip' },
        chunks: [grpcFrame(bomb, true)],
      });
      expect(grpcStatus(outcome)).toBe('8');
      expect(grpcMessage(outcome)).toBe(
        `Received message that decompresses to a size larger than ${4 * 1024 * 1024}`,
      );
    });

    it.each([['gzip'], ['identity,deflate,gzip'], ['br']])(
      'grpc-accept-encoding %s: the reply is not compressed',
      async (accept) => {
        const outcome = await same({
          headers: { 'grpc-accept-encoding': accept },
          chunks: [grpcFrame(CHECK)],
        });
        expect(grpcStatus(outcome)).toBe('0');
        expect(outcome.headers?.['grpc-encoding']).toBe('identity');
        expect(outcome.body.slice(0, 2)).toBe('00');
      },
    );
  });

  describe('framing', () => {
    it('a message split over many DATA frames is put back together', async () => {
      const frame = grpcFrame(CHECK);
      const bytes = [...frame].map((byte) => Buffer.from([byte]));
      expect(grpcStatus(await same({ chunks: bytes }))).toBe('0');
      // The prefix in two, then the rest in one.
      const split = [frame.subarray(0, 2), frame.subarray(2, 5), frame.subarray(5)];
      expect(grpcStatus(await same({ chunks: split }))).toBe('0');
    });

    it('a zero-length message is an empty request: INVALID_ARGUMENT', async () => {
      const outcome = await same({ chunks: [grpcFrame(Buffer.alloc(0))] });
      expect(grpcStatus(outcome)).toBe('3');
    });

    it('a message over the receive limit is RESOURCE_EXHAUSTED, with both sizes', async () => {
      const prefix = Buffer.from([0, 0, 0x50, 0, 0]); // 5 MiB announced; only the prefix is sent
      const outcome = await same({ chunks: [prefix] });
      expect(grpcStatus(outcome)).toBe('8');
      expect(grpcMessage(outcome)).toBe(
        `Received message larger than max (${5 * 1024 * 1024} vs ${4 * 1024 * 1024})`,
      );
    });

    it('two messages on the unary call are UNIMPLEMENTED', async () => {
      const outcome = await same({ chunks: [grpcFrame(CHECK), grpcFrame(CHECK)] });
      expect(grpcStatus(outcome)).toBe('12');
      expect(grpcMessage(outcome)).toMatch(/^Received a second request message/);
      const together = await same({
        chunks: [Buffer.concat([grpcFrame(CHECK), grpcFrame(CHECK)])],
      });
      expect(grpcStatus(together)).toBe('12');
    });

    it('no message, and a frame cut short by the end of the stream, are UNIMPLEMENTED', async () => {
      expect(grpcStatus(await same({ chunks: [] }))).toBe('12');
      const truncated = await same({ chunks: [grpcFrame(CHECK).subarray(0, 9)] });
      expect(grpcStatus(truncated)).toBe('12');
      expect(grpcMessage(truncated)).toMatch(/^Received no request message/);
      expect(grpcStatus(await same({ chunks: [Buffer.from([0, 0])] }))).toBe('12');
    });
  });

  describe('requests', () => {
    it.each([['application/json'], ['text/plain'], ['application/grp']])(
      'content-type %s: HTTP 415, with no gRPC status',
      async (type) => {
        const outcome = await same({
          headers: { 'content-type': type },
          chunks: [grpcFrame(CHECK)],
        });
        expect(outcome.headers?.[':status']).toBe(415);
        expect(grpcStatus(outcome)).toBeUndefined();
      },
    );

    it('no content-type: HTTP 415', async () => {
      const outcome = await same({ omit: ['content-type'], chunks: [grpcFrame(CHECK)] });
      expect(outcome.headers?.[':status']).toBe(415);
    });

    it('application/grpc+proto and application/grpc+json are served', async () => {
      for (const type of ['application/grpc+proto', 'application/grpc+json']) {
        const outcome = await same({
          headers: { 'content-type': type },
          chunks: [grpcFrame(CHECK)],
        });
        expect(grpcStatus(outcome)).toBe('0');
      }
    });

    it('a request without te: trailers is served', async () => {
      expect(grpcStatus(await same({ omit: ['te'], chunks: [grpcFrame(CHECK)] }))).toBe('0');
    });

    it('a method other than POST is served, as grpc-js serves it', async () => {
      for (const method of ['GET', 'PUT']) {
        const outcome = await same({ headers: { ':method': method }, chunks: [grpcFrame(CHECK)] });
        expect(grpcStatus(outcome)).toBe('0');
      }
    });

    it('a request that does not decode is INVALID_ARGUMENT, naming the fault', async () => {
      const outcome = await same({ chunks: [grpcFrame(encode({ domain: '', descriptors: [] }))] });
      expect(grpcStatus(outcome)).toBe('3');
      expect(grpcMessage(outcome)).toMatch(/domain/);
      const garbage = await same({ chunks: [grpcFrame(Buffer.from([0xff, 0xff, 0xff]))] });
      expect(grpcStatus(garbage)).toBe('3');
    });

    it('OK and OVER_LIMIT replies are the same bytes', async () => {
      const check = encode({
        domain: 'conf',
        descriptors: [
          { entries: [{ key: 'k', value: 'counted' }] },
          {
            entries: [
              { key: 'tenant', value: 'acme' },
              { key: 'route', value: '/a' },
            ],
          },
        ],
      });
      const bodies = new Set<string>();
      for (let i = 0; i < 4; i++) {
        const outcome = await same({ chunks: [grpcFrame(check)] });
        expect(grpcStatus(outcome)).toBe('0');
        bodies.add(outcome.body);
      }
      // Remaining 2, 1, then over twice (the route allows 2): three distinct replies.
      expect(bodies.size).toBe(3);
    });
  });

  describe('cancels', () => {
    it('a cancel while the store decides sends nothing more, and frees the call', async () => {
      const narrow = await startPair(redis, { GRPC_MAX_CALLS: '1' });
      try {
        const { outcome } = await whileRedisSleeps(600, async () => {
          const check = freshCheck();
          const [fast, grpcJs] = await Promise.all([
            rawCall(narrow.sessions.fast, SHOULD_RATE_LIMIT_PATH, {
              chunks: [grpcFrame(check)],
              cancelAfterMs: 100,
            }),
            rawCall(narrow.sessions.grpcJs, SHOULD_RATE_LIMIT_PATH, {
              chunks: [grpcFrame(check)],
              cancelAfterMs: 100,
            }),
          ]);
          expect(fast).toEqual(grpcJs);
          return fast;
        });
        expect(outcome.headers).toBeUndefined();
        expect(outcome.rstCode).toBe(8); // CANCEL, the client's own
        // With room for one call, a call held open after its cancel would refuse every call after it.
        for (const service of [narrow.fast, narrow.grpcJs]) {
          const session = service === narrow.fast ? narrow.sessions.fast : narrow.sessions.grpcJs;
          let answered: RawOutcome | undefined;
          for (let tries = 0; tries < 40 && grpcStatus(answered ?? blank) !== '0'; tries++) {
            if (tries > 0) await sleep(50);
            answered = await rawCall(session, SHOULD_RATE_LIMIT_PATH, {
              chunks: [grpcFrame(CHECK)],
            });
          }
          expect(grpcStatus(answered ?? blank)).toBe('0');
        }
      } finally {
        await narrow.stop();
      }
    });
  });

  describe('metadata', () => {
    it('traceparent reaches tracing on both paths, and binary headers are accepted', async () => {
      const receiver = await startGrpcReceiver();
      const traced = await startPair(redis, {
        OTEL_EXPORTER_OTLP_ENDPOINT: receiver.endpoint,
        OTEL_EXPORTER_OTLP_PROTOCOL: 'grpc',
      });
      const trace = '4bf92f3577b34da6a3ce929d0e0e4736';
      try {
        const { fast, grpcJs } = await traced.send({
          headers: {
            traceparent: `00-${trace}-00f067aa0ba902b7-01`,
            tracestate: 'envoy=1',
            'x-blob-bin': Buffer.from([0, 1, 2, 255]).toString('base64'),
          },
          chunks: [grpcFrame(CHECK)],
        });
        expect(fast).toEqual(grpcJs);
        expect(grpcStatus(fast)).toBe('0');
      } finally {
        await traced.stop(); // stopping flushes the spans still buffered
        await receiver.close();
      }
      const spans = receiver.spans().filter((span) => span.traceId === trace);
      expect(spans.map((span) => [span.parentSpanId, span.traceState])).toEqual([
        ['00f067aa0ba902b7', 'envoy=1'],
        ['00f067aa0ba902b7', 'envoy=1'],
      ]);
    });
  });

  describe('random frames and headers', () => {
    it('every sequence gets the same answer from both paths', async () => {
      await fc.assert(
        fc.asyncProperty(rawCalls, async ({ call, racy }) => {
          const { fast, grpcJs } = await pair.send(call);
          // Every call is answered: a status, or HTTP 415.
          expect(grpcStatus(fast) ?? fast.headers?.[':status']).toBeDefined();
          if (!racy) {
            expect(fast).toEqual(grpcJs);
            return;
          }
          // grpc-js inflates the messages of one call side by side and answers the first
          // failure to settle, so which of two errors it sends depends on zlib's timing; the
          // fast path takes them in order (see docs/grpc.md). Both must refuse the call.
          expect(fast.headers?.[':status']).toBe(grpcJs.headers?.[':status']);
          expect(grpcStatus(fast)).not.toBe('0');
          expect(grpcStatus(grpcJs)).not.toBe('0');
        }),
        { numRuns: 150 },
      );
    });
  });
});

const blank: RawOutcome = { headers: undefined, trailers: undefined, body: '', rstCode: 0 };

/** Runs `work` while Redis sleeps in DEBUG SLEEP, so that every decision waits on the store. */
async function whileRedisSleeps<T>(
  sleepMs: number,
  work: () => Promise<T>,
): Promise<{ outcome: T; elapsedMs: number }> {
  const asleep = redis.client.call('DEBUG', 'SLEEP', String(sleepMs / 1000));
  await sleep(50);
  const started = Date.now();
  const outcome = await work();
  const elapsedMs = Date.now() - started;
  await asleep;
  return { outcome, elapsedMs };
}

// Random requests: valid ones, bad ones and bytes, in frames that may be compressed, flagged
// wrongly, split anywhere, or cut short; under random headers of the kinds a peer may send.
const entry = fc.record({
  key: fc.constantFrom('k', 'tenant', 'route', ''),
  value: fc.constantFrom('a', 'b', 'acme', '/a', ''),
});
const request = fc.record(
  {
    domain: fc.constantFrom('conf', 'other', ''),
    descriptors: fc.array(fc.record({ entries: fc.array(entry, { maxLength: 3 }) }), {
      maxLength: 3,
    }),
    hits_addend: fc.constantFrom(0, 1, 2, 4),
  },
  { requiredKeys: ['domain', 'descriptors'] },
);
const payload = fc.oneof(
  { weight: 4, arbitrary: request.map(encode) },
  { weight: 1, arbitrary: fc.uint8Array({ maxLength: 40 }).map((bytes) => Buffer.from(bytes)) },
);
const frame = fc
  .record({
    payload,
    packing: fc.constantFrom('plain', 'plain', 'gzip', 'deflate', 'flagged'),
  })
  .map(({ payload: message, packing }) => {
    if (packing === 'gzip') return grpcFrame(zlib.gzipSync(message), true);
    if (packing === 'deflate') return grpcFrame(zlib.deflateSync(message), true);
    return grpcFrame(message, packing === 'flagged');
  });
const optional = <T>(arbitrary: fc.Arbitrary<T>) => fc.option(arbitrary, { nil: undefined });
const headers = fc.record({
  'content-type': optional(
    fc.constantFrom('application/grpc', 'application/grpc+proto', 'application/json'),
  ),
  te: optional(fc.constant('trailers')),
  'grpc-timeout': optional(fc.constantFrom('10S', '99999m', '2M', '1H', 'soon', '10', 'x5S')),
  'grpc-encoding': optional(fc.constantFrom('identity', 'gzip', 'deflate', 'snappy')),
  'grpc-accept-encoding': optional(fc.constantFrom('gzip', 'identity,gzip')),
  'x-tenant-id': optional(fc.constantFrom('acme', 'beta')),
  'x-blob-bin': optional(fc.constant('AAEC/w==')),
});
/** A call, and whether grpc-js would inflate two of its messages at once (see above). */
const rawCalls: fc.Arbitrary<{ call: RawCall; racy: boolean }> = fc
  .record({
    headers,
    frames: fc.array(frame, { maxLength: 3 }),
    cuts: fc.array(fc.nat({ max: 400 }), { maxLength: 4 }),
    truncate: fc.option(fc.nat({ max: 400 }), { nil: undefined, freq: 4 }),
  })
  .map(({ headers: given, frames, cuts, truncate }) => {
    let bytes = Buffer.concat(frames);
    if (truncate !== undefined) bytes = bytes.subarray(0, truncate % (bytes.length + 1));
    const points = [...new Set(cuts.map((cut) => cut % (bytes.length + 1)))].sort((a, b) => a - b);
    const chunks: Buffer[] = [];
    let at = 0;
    for (const point of [...points, bytes.length]) {
      if (point > at) chunks.push(bytes.subarray(at, point));
      at = Math.max(at, point);
    }
    const set: http2.OutgoingHttpHeaders = {};
    const omit: string[] = [];
    for (const [name, value] of Object.entries(given)) {
      if (value !== undefined) set[name] = value;
      else if (name === 'content-type' || name === 'te') omit.push(name);
    }
    const inflating = given['grpc-encoding'] === 'gzip' || given['grpc-encoding'] === 'deflate';
    return { call: { headers: set, omit, chunks }, racy: inflating && flaggedFrames(bytes) >= 2 };
  });

/** The whole frames flagged compressed in a request's bytes, as a server would read them. */
function flaggedFrames(bytes: Buffer): number {
  let flagged = 0;
  for (let at = 0; bytes.length - at >= 5;) {
    const end = at + 5 + bytes.readUInt32BE(at + 1);
    if (end > bytes.length) break;
    if (bytes[at] === 1) flagged++;
    at = end;
  }
  return flagged;
}
