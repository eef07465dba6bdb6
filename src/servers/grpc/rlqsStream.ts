/**
 * StreamRateLimitQuotas on grpc-js: each stream a session (session.ts), each usage report
 * answered with one response of bucket actions. RLQS streams live long, so instead of the call
 * timeout and byte budget of short calls they have bounds of their own:
 * - streams open at once (RESOURCE_EXHAUSTED for one more);
 * - buckets per stream (the session refuses one more, and the stream ends RESOURCE_EXHAUSTED);
 * - reports per second per stream, over a burst of a few seconds' worth;
 * - a stream that sends no report for the stale time is ended (CANCELLED), its demand left to
 *   expire in the store;
 * - bytes of answers not yet taken by the client, and of reports waiting for theirs, per stream
 *   and across the process's streams: the stream whose answer would pass either bound ends
 *   RESOURCE_EXHAUSTED. grpc-js queues every answer a client does not read, without a bound;
 * - an answer its client has not taken for the unread time ends its stream (CANCELLED), so that a
 *   client gone silent under the byte bounds does not hold its answers for the stale time.
 * A stream's status goes after its queued answers, so a client that does not read would hold an
 * ended stream, and a shutdown, for ever: a stream still open a second after it ended is reset.
 * A malformed report ends its stream with INVALID_ARGUMENT naming the fault; a store failure
 * (or no rules yet, over xDS) answers UNAVAILABLE, and Envoy falls back to its expired-assignment behaviour.
 */
import { randomUUID } from 'node:crypto';
import * as grpc from '@grpc/grpc-js';
import { InvalidRequestError } from '../../core/errors.js';
import type { Bucket } from '../../rlqs/buckets.js';
import type { RlqsEvent, RlqsGauges } from '../../rlqs/events.js';
import type { RlqsSettings } from '../../rlqs/rlqsSettings.js';
import {
  BucketLimitError,
  type BucketAction,
  type BucketUsage,
  type Session,
} from '../../rlqs/session.js';
import { toGrpcStatus } from './status.js';

/** What the gRPC server gives each stream beside grpc-js's call. */
export interface RlqsTransport {
  /**
   * Resets the call's HTTP/2 stream, dropping what it has not sent, unless it closed already:
   * RESOURCE_EXHAUSTED as ENHANCE_YOUR_CALM, any other code as CANCEL.
   */
  reset(code: grpc.status): void;
}

export type RlqsStreamHandler = (
  call: grpc.ServerDuplexStream<unknown, unknown>,
  transport: RlqsTransport,
) => void;

/**
 * The streams' bounds, as RlqsSettings names them (RLQS_MAX_BUCKETS_PER_STREAM also bounds the
 * usages of one report).
 */
export interface RlqsStreamOptions extends Pick<
  RlqsSettings,
  | 'maxStreams'
  | 'maxBucketsPerStream'
  | 'maxReportsPerSecond'
  | 'maxBucketReportsPerSecond'
  | 'staleMs'
  | 'maxQueuedBytes'
  | 'maxQueuedBytesTotal'
  | 'unreadMs'
> {
  /**
   * A new stream's session, under a name unique across instances; `push` sends actions unasked,
   * in order with the answers to its reports.
   */
  session(streamId: string, push: (work: () => Promise<BucketAction[]>) => void): Session;
  /** Told of each report answered, stream opened and closed, for metrics. */
  onEvent?(event: RlqsEvent): void;
  /** Told of a failure that is a bug, for the log; the stream ends INTERNAL. */
  onInternalError?(error: unknown): void;
}

export interface RlqsService extends RlqsGauges {
  handler: RlqsStreamHandler;
  /**
   * Ends every open stream with UNAVAILABLE (shutdown): Envoy keeps its assignments until they
   * expire and opens its stream again, to another instance.
   */
  close(): void;
}

interface WireUsage {
  bucket_id?: { bucket?: Record<string, string> };
  time_elapsed?: { seconds?: string | number; nanos?: number };
  num_requests_allowed?: string | number;
  num_requests_denied?: string | number;
}

const MAX_ENTRY_BYTES = 1024;
/** A BucketId's entries: the levels of one path through the rules, and more than any rule has. */
const MAX_BUCKET_ENTRIES = 64;

function readUsage(wire: WireUsage, at: number): BucketUsage {
  const bucket = wire.bucket_id?.bucket;
  if (bucket === undefined || Object.keys(bucket).length === 0) {
    throw new InvalidRequestError(`bucket_quota_usages[${at}].bucket_id is empty`);
  }
  if (Object.keys(bucket).length > MAX_BUCKET_ENTRIES) {
    throw new InvalidRequestError(
      `bucket_quota_usages[${at}].bucket_id has more than ${MAX_BUCKET_ENTRIES} entries`,
    );
  }
  for (const [key, value] of Object.entries(bucket)) {
    if (key.length + value.length > MAX_ENTRY_BYTES) {
      throw new InvalidRequestError(
        `bucket_quota_usages[${at}].bucket_id entry '${key.slice(0, 64)}' is over ${MAX_ENTRY_BYTES} bytes`,
      );
    }
  }
  const count = (value: string | number | undefined) => Number(value ?? 0);
  const elapsed = wire.time_elapsed;
  const elapsedMs =
    elapsed === undefined
      ? undefined
      : Number(elapsed.seconds ?? 0) * 1000 + (elapsed.nanos ?? 0) / 1e6;
  if (elapsedMs !== undefined && !(elapsedMs >= 0)) {
    throw new InvalidRequestError(`bucket_quota_usages[${at}].time_elapsed is negative`);
  }
  return {
    bucket,
    elapsedMs,
    allowed: count(wire.num_requests_allowed),
    denied: count(wire.num_requests_denied),
  };
}

function wireAction(action: BucketAction): object {
  const bucket_id = { bucket: action.bucket as Bucket };
  if (action.kind === 'abandon') return { bucket_id, abandon_action: {} };
  const { strategy } = action;
  const ttl = {
    seconds: String(Math.floor(action.ttlMs / 1000)),
    nanos: (action.ttlMs % 1000) * 1e6,
  };
  const rate_limit_strategy =
    strategy.kind === 'blanket'
      ? { blanket_rule: strategy.rule }
      : {
          token_bucket: {
            max_tokens: strategy.maxTokens,
            tokens_per_fill: { value: strategy.tokensPerFill },
            fill_interval: { seconds: String(strategy.fillIntervalSeconds), nanos: 0 },
          },
        };
  return {
    bucket_id,
    quota_assignment_action: { assignment_time_to_live: ttl, rate_limit_strategy },
  };
}

/** Reports per second: a bucket of a few seconds' worth, refilled continuously. */
function reportAllowance(perSecond: number): {
  take(now: number, units?: number): boolean;
  lastAt(): number;
} {
  const burst = perSecond * 5;
  let allowance = burst;
  let last = performance.now();
  return {
    take(now, units = 1) {
      allowance = Math.min(burst, allowance + ((now - last) / 1000) * perSecond);
      last = now;
      if (allowance < units) return false;
      allowance -= units;
      return true;
    },
    lastAt: () => last,
  };
}

interface ReportMessage {
  domain?: string;
  bucket_quota_usages?: WireUsage[];
}

/**
 * The stream's domain after this message, and its usages; throws InvalidRequestError, or
 * BucketLimitError for more usages than the stream may hold buckets.
 */
function readReport(
  message: ReportMessage,
  domain: string | undefined,
  maxUsages: number,
): { domain: string; usages: BucketUsage[] } {
  if (message.domain) {
    if (domain !== undefined && domain !== message.domain) {
      throw new InvalidRequestError(`domain changed from '${domain}' to '${message.domain}'`);
    }
    domain = message.domain;
  }
  if (domain === undefined) throw new InvalidRequestError('the first report has no domain');
  const usages = message.bucket_quota_usages ?? [];
  // A stream holds at most maxUsages buckets, and a report names each of its buckets once: more
  // is a stream past its bucket bound, refused as the session refuses one bucket more.
  if (usages.length > maxUsages) {
    throw new BucketLimitError(
      `a report of ${usages.length} buckets: this stream may hold ${maxUsages} buckets, RLQS_MAX_BUCKETS_PER_STREAM`,
    );
  }
  return { domain, usages: usages.map(readUsage) };
}

export function createRlqsService(options: RlqsStreamOptions): RlqsService {
  let open = 0;
  const sessions = new Map<Session, (code: grpc.status, details: string) => void>();
  const event = (e: RlqsEvent) => options.onEvent?.(e);
  const queued: QueuedTotal = { bytes: 0 };
  const handler: RlqsStreamHandler = (call, transport) => {
    if (open >= options.maxStreams) {
      event({ kind: 'refused', reason: 'streams' });
      call.emit('error', {
        code: grpc.status.RESOURCE_EXHAUSTED,
        details: `${options.maxStreams} RLQS streams are open, RLQS_MAX_STREAMS`,
      });
      return;
    }
    open += 1;
    event({ kind: 'stream', open });
    const pushes: Pushes = {};
    const session = options.session(randomUUID(), (work) => pushes.to?.(work));
    const output = createOutput(call, transport, options, queued, event);
    const end = serveStream(call, output, { session, pushes }, options, event, () => {
      open -= 1;
      sessions.delete(session);
      event({ kind: 'stream', open });
    });
    sessions.set(session, end);
  };
  const buckets = () => {
    let held = 0;
    for (const session of sessions.keys()) held += session.buckets();
    return held;
  };
  const close = () => {
    for (const end of [...sessions.values()]) {
      end(grpc.status.UNAVAILABLE, 'the server is shutting down');
    }
  };
  return { handler, streams: () => open, buckets, queuedBytes: () => queued.bytes, close };
}

/** How long an ended stream may take to send what it queued and its status. */
const FLUSH_MS = 1_000;

/** Bytes of answers queued across the process's streams, with the reports waiting for theirs. */
interface QueuedTotal {
  bytes: number;
}

type OutputLimits = Pick<RlqsStreamOptions, 'maxQueuedBytesTotal' | 'maxQueuedBytes' | 'unreadMs'>;

/** The stream's way to its client: its answers, what of them waits, and its end. */
interface StreamOutput {
  /**
   * Counts the answer to a report, about `bytes`, as queued from now until it has left for the
   * client; else the bound it would take what is queued past, the stream's or the process's
   * (one answer alone always goes: the stream's first, or the first across streams).
   */
  reserve(bytes: number): 'queued_bytes' | 'queued_bytes_total' | undefined;
  /** Writes a reserved answer; undefined: there is none, its bytes leave the queue. */
  send(answer: object | undefined, bytes: number): void;
  /** Ends the stream with this status (OK: a plain end), reset if still open a second later. */
  end(code: grpc.status, details: string): void;
  ended(): boolean;
  /** The call closed: nothing more is sent, and what it queued leaves the process's count. */
  close(): void;
}

function createOutput(
  call: grpc.ServerDuplexStream<unknown, unknown>,
  transport: RlqsTransport,
  limits: OutputLimits,
  total: QueuedTotal,
  event: (e: RlqsEvent) => void,
): StreamOutput {
  let queued = 0;
  let ended = false;
  let closed = false;
  const release = (bytes: number) => {
    if (closed) return;
    queued -= bytes;
    total.bytes -= bytes;
  };
  const close = () => {
    if (closed) return;
    ended = true;
    total.bytes -= queued;
    queued = 0;
    closed = true;
    unread.stop();
  };
  const end = (code: grpc.status, details: string) => {
    if (ended) return;
    ended = true;
    unread.stop();
    if (code === grpc.status.OK) call.end();
    else call.emit('error', { code, details });
    // The status waits behind every answer queued: a client that does not read never gets
    // it, and the stream would stay open, its answers held.
    const flush = setTimeout(() => {
      transport.reset(code);
      call.destroy();
      close();
    }, FLUSH_MS);
    flush.unref();
  };
  const unread = watchUnread(limits.unreadMs, () => {
    event({ kind: 'refused', reason: 'unread' });
    end(
      grpc.status.CANCELLED,
      `an answer waited ${limits.unreadMs} ms for the client to read it, RLQS_UNREAD_TIMEOUT`,
    );
  });
  return {
    reserve(bytes) {
      if (queued > 0 && queued + bytes > limits.maxQueuedBytes) return 'queued_bytes';
      if (total.bytes > 0 && total.bytes + bytes > limits.maxQueuedBytesTotal) {
        return 'queued_bytes_total';
      }
      queued += bytes;
      total.bytes += bytes;
      return undefined;
    },
    send(answer, bytes) {
      if (answer === undefined || ended) return release(bytes);
      unread.written();
      // The callback comes once the answer has left for the client, or the call was destroyed;
      // the callbacks of a stream's writes come in order.
      call.write(answer, () => {
        unread.taken();
        release(bytes);
      });
    },
    end,
    ended: () => ended,
    close,
  };
}

/**
 * Times the answers written and not yet taken, oldest first, with one timer at most, armed for
 * the oldest's deadline: `onLate` once the oldest has waited `unreadMs`.
 */
function watchUnread(
  unreadMs: number,
  onLate: () => void,
): { written(): void; taken(): void; stop(): void } {
  const writtenAt: number[] = [];
  let oldest = 0;
  let timer: NodeJS.Timeout | undefined;
  let stopped = false;
  const arm = (ms: number) => {
    timer = setTimeout(check, ms);
    timer.unref();
  };
  const check = () => {
    timer = undefined;
    if (stopped || oldest === writtenAt.length) return;
    const waited = performance.now() - (writtenAt[oldest] ?? 0);
    if (waited >= unreadMs) onLate();
    else arm(unreadMs - waited);
  };
  return {
    written() {
      writtenAt.push(performance.now());
      if (timer === undefined && !stopped) arm(unreadMs);
    },
    taken() {
      oldest += 1;
      if (oldest === writtenAt.length || oldest > 1_024) {
        writtenAt.splice(0, oldest);
        oldest = 0;
      }
    },
    stop() {
      stopped = true;
      if (timer !== undefined) clearTimeout(timer);
      timer = undefined;
    },
  };
}

/**
 * About the size of the answer to these usages on the wire: each bucket's id, echoed, and its
 * action's fields. A report is about as large.
 */
function answerBytes(usages: readonly { bucket: Bucket }[]): number {
  let bytes = 0;
  for (const usage of usages) {
    bytes += 64;
    for (const [key, value] of Object.entries(usage.bucket)) bytes += key.length + value.length + 8;
  }
  return bytes;
}

/** Why a stream past a bound of bytes queued ends, naming the bound's setting. */
function queuedDetails(past: 'queued_bytes' | 'queued_bytes_total', limits: OutputLimits): string {
  return past === 'queued_bytes'
    ? `more than ${limits.maxQueuedBytes} bytes of answers wait for the client to read them, RLQS_MAX_QUEUED_BYTES`
    : `more than ${limits.maxQueuedBytesTotal} bytes of answers wait for their clients across RLQS streams, RLQS_MAX_QUEUED_BYTES_TOTAL`;
}

/**
 * Actions a session sends unasked (buckets resumed as their window rolls over), queued after the
 * answers before them. Past a bound of bytes queued, they are left to the next answer.
 */
async function sendUnasked(
  output: StreamOutput,
  event: (e: RlqsEvent) => void,
  work: () => Promise<BucketAction[]>,
): Promise<void> {
  if (output.ended()) return;
  const actions = await work().catch(() => []);
  if (actions.length === 0 || output.ended()) return;
  const bytes = answerBytes(actions);
  if (output.reserve(bytes) !== undefined) return;
  event({ kind: 'resumed', actions });
  output.send({ bucket_action: actions.map(wireAction) }, bytes);
}

/** Calls `onStale` while no report has come for `staleMs`; the timer keeps no process alive. */
function watchStale(
  staleMs: number,
  allowance: { lastAt(): number },
  onStale: () => void,
): NodeJS.Timeout {
  const timer = setInterval(
    () => {
      if (performance.now() - allowance.lastAt() >= staleMs) onStale();
    },
    Math.max(100, Math.min(staleMs / 2, 10_000)),
  );
  timer.unref();
  return timer;
}

/** Where a session's unasked actions go: the stream's queue, once it serves. */
interface Pushes {
  to?: (work: () => Promise<BucketAction[]>) => void;
}

function serveStream(
  call: grpc.ServerDuplexStream<unknown, unknown>,
  output: StreamOutput,
  { session, pushes }: { session: Session; pushes: Pushes },
  options: RlqsStreamOptions,
  event: (e: RlqsEvent) => void,
  release: () => void,
): (code: grpc.status, details: string) => void {
  const allowance = reportAllowance(options.maxReportsPerSecond);
  // Each bucket of a report is store work: a stream's whole work a second is bounded too.
  const bucketAllowance = reportAllowance(options.maxBucketReportsPerSecond);
  let domain: string | undefined;
  let chain = Promise.resolve();
  const end = output.end;
  const stale = watchStale(options.staleMs, allowance, () => {
    event({ kind: 'refused', reason: 'stale' });
    end(grpc.status.CANCELLED, `no usage report for ${options.staleMs} ms, RLQS_STALE_STREAM`);
  });
  let closed = false;
  const closeOnce = () => {
    if (closed) return;
    closed = true;
    output.close();
    clearInterval(stale);
    void session.close();
    release();
  };
  for (const name of ['close', 'finish', 'cancelled']) call.on(name, closeOnce);
  call.on('error', () => undefined);
  // Envoy closed its side: answer what is in flight, then end with OK.
  call.on('end', () => {
    void chain.then(() => end(grpc.status.OK, 'OK'));
  });

  const answer = async (reported: string, usages: BucketUsage[], bytes: number) => {
    if (output.ended()) return output.send(undefined, bytes);
    try {
      const actions = await session.report(reported, usages);
      if (output.ended()) return output.send(undefined, bytes);
      const allowed = usages.reduce((sum, usage) => sum + usage.allowed, 0);
      const denied = usages.reduce((sum, usage) => sum + usage.denied, 0);
      event({ kind: 'report', buckets: usages.length, allowed, denied, actions });
      output.send({ bucket_action: actions.map(wireAction) }, bytes);
    } catch (error) {
      output.send(undefined, bytes);
      if (error instanceof BucketLimitError) event({ kind: 'refused', reason: 'buckets' });
      const status = toGrpcStatus(error);
      if (status.code === grpc.status.INTERNAL) options.onInternalError?.(error);
      end(status.code, status.details);
    }
  };

  pushes.to = (work) => {
    chain = chain.then(() => sendUnasked(output, event, work));
  };

  call.on('data', (message: ReportMessage) => {
    if (output.ended()) return;
    if (!allowance.take(performance.now())) {
      event({ kind: 'refused', reason: 'reports' });
      end(
        grpc.status.RESOURCE_EXHAUSTED,
        `more than ${options.maxReportsPerSecond} usage reports a second, RLQS_MAX_REPORTS_PER_SECOND`,
      );
      return;
    }
    let report: { domain: string; usages: BucketUsage[] };
    try {
      report = readReport(message, domain, options.maxBucketsPerStream);
    } catch (error) {
      event({ kind: 'refused', reason: error instanceof BucketLimitError ? 'buckets' : 'invalid' });
      const status = toGrpcStatus(error);
      end(status.code, status.details);
      return;
    }
    domain = report.domain;
    if (!bucketAllowance.take(performance.now(), report.usages.length)) {
      event({ kind: 'refused', reason: 'reports' });
      end(
        grpc.status.RESOURCE_EXHAUSTED,
        `more than ${options.maxBucketReportsPerSecond} bucket usages a second, RLQS_MAX_BUCKET_REPORTS_PER_SECOND`,
      );
      return;
    }
    // Reports waiting for their answers count as queued too: a report that comes faster than
    // its answers leave waits in this process, as its answer would.
    const bytes = answerBytes(report.usages);
    const past = output.reserve(bytes);
    if (past !== undefined) {
      event({ kind: 'refused', reason: past });
      end(grpc.status.RESOURCE_EXHAUSTED, queuedDetails(past, options));
      return;
    }
    chain = chain.then(() => answer(report.domain, report.usages, bytes));
  });
  return end;
}
