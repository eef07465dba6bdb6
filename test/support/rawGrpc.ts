import http2 from 'node:http2';
import { setTimeout as sleep } from 'node:timers/promises';

/**
 * A gRPC call written by hand on node:http2's client: any headers, any DATA frames, a cancel at
 * any moment. It records what came back as a peer on the wire sees it, so that two servers'
 * answers to the same bytes can be compared.
 */
export interface RawCall {
  /** Request headers over the defaults (POST, the path, `application/grpc`, `te: trailers`). */
  headers?: http2.OutgoingHttpHeaders;
  /** Default headers to leave out, e.g. `te`. */
  omit?: readonly string[];
  /** Each buffer goes as its own write, in order, the next after the last has left. */
  chunks: readonly Buffer[];
  /** Waits this long between the headers and the first chunk. */
  pauseMs?: number;
  /** Whether the request ends (END_STREAM) after the chunks; true unless false. */
  end?: boolean;
  /** Resets the stream with CANCEL this long after the last chunk. */
  cancelAfterMs?: number;
}

export interface RawOutcome {
  /** The response headers, `date` left out; for a Trailers-Only answer, the trailers too. */
  headers: Record<string, string | string[] | number | undefined> | undefined;
  /** The trailers, when they came in a HEADERS frame of their own. */
  trailers: Record<string, string | string[] | undefined> | undefined;
  /** Every DATA byte, as hex. */
  body: string;
  /** The RST_STREAM code the stream closed with (0: none, a normal close). */
  rstCode: number;
}

/** The response headers that vary between two answers to the same bytes. */
const VARYING = new Set(['date']);

export function grpcFrame(message: Buffer, compressed = false): Buffer {
  const prefix = Buffer.alloc(5);
  prefix[0] = compressed ? 1 : 0;
  prefix.writeUInt32BE(message.length, 1);
  return Buffer.concat([prefix, message]);
}

export async function rawCall(
  session: http2.ClientHttp2Session,
  path: string,
  call: RawCall,
  timeoutMs = 10_000,
): Promise<RawOutcome> {
  const omitted = new Set(call.omit);
  const given = Object.entries({
    ':method': 'POST',
    ':path': path,
    'content-type': 'application/grpc',
    te: 'trailers',
    ...call.headers,
  });
  const headers = Object.fromEntries(given.filter(([name]) => !omitted.has(name)));
  const stream = session.request(headers, { endStream: false });
  const outcome: RawOutcome = { headers: undefined, trailers: undefined, body: '', rstCode: 0 };
  const body: Buffer[] = [];
  stream.on('response', (response) => (outcome.headers = withoutVarying(response)));
  stream.on('trailers', (trailers) => (outcome.trailers = withoutVarying(trailers) as never));
  stream.on('data', (chunk: Buffer) => body.push(chunk));
  stream.on('error', () => {
    // A reset is recorded as its code, below.
  });
  const closed = new Promise<void>((resolve) => stream.on('close', resolve));
  const timer = setTimeout(() => stream.close(http2.constants.NGHTTP2_CANCEL), timeoutMs);
  try {
    if (call.pauseMs !== undefined) await sleep(call.pauseMs);
    for (const chunk of call.chunks) {
      if (stream.closed || stream.destroyed) break;
      await new Promise<void>((resolve) => stream.write(chunk, () => resolve()));
      // A turn between writes, so that each leaves as a DATA frame of its own.
      await new Promise((resolve) => setImmediate(resolve));
    }
    if (call.cancelAfterMs !== undefined) {
      await sleep(call.cancelAfterMs);
      stream.close(http2.constants.NGHTTP2_CANCEL);
    } else if (call.end !== false && !stream.closed) {
      stream.end();
    }
    await closed;
  } finally {
    clearTimeout(timer);
  }
  outcome.body = Buffer.concat(body).toString('hex');
  outcome.rstCode = stream.rstCode ?? 0;
  return outcome;
}

function withoutVarying(
  headers: http2.IncomingHttpHeaders,
): Record<string, string | string[] | number | undefined> {
  const kept: Record<string, string | string[] | number | undefined> = {};
  for (const [name, value] of Object.entries(headers)) if (!VARYING.has(name)) kept[name] = value;
  return kept;
}

export function connect(address: string): Promise<http2.ClientHttp2Session> {
  return new Promise((resolve, reject) => {
    const session = http2.connect(`http://${address}`);
    session.once('connect', () => resolve(session));
    session.once('error', reject);
  });
}
