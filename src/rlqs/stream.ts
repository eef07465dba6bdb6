/**
 * StreamRateLimitQuotas on grpc-js: each stream a session (session.ts), each usage report
 * answered with one response of bucket actions. RLQS streams live long, so instead of the call
 * timeout and byte budget of short calls they have bounds of their own:
 * - streams open at once (RESOURCE_EXHAUSTED for one more);
 * - buckets per stream (the session refuses one more, and the stream ends RESOURCE_EXHAUSTED);
 * - reports per second per stream, over a burst of a few seconds' worth;
 * - a stream that sends no report for the stale time is ended (CANCELLED), its demand left to
 *   expire in the store.
 * A malformed report ends its stream with INVALID_ARGUMENT naming the fault; a store failure
 * (or no rules yet, over xDS) answers UNAVAILABLE, and Envoy falls back to its expired-assignment behaviour.
 */
import { randomUUID } from 'node:crypto';
import * as grpc from '@grpc/grpc-js';
import { NoRulesError, StoreError } from '../core/errors.js';
import type { Bucket } from './buckets.js';
import { BucketLimitError, type BucketAction, type BucketUsage, type Session } from './session.js';

export interface RlqsStreamOptions {
  /** A new stream's session, under a name unique across instances. */
  session(streamId: string): Session;
  maxStreams: number;
  /** RLQS_MAX_BUCKETS_PER_STREAM, which also bounds the usages of one report. */
  maxBucketsPerStream: number;
  maxReportsPerSecond: number;
  staleMs: number;
  /** Told of each report answered, stream opened and closed, for metrics. */
  onEvent?(event: RlqsEvent): void;
  /** Told of a failure that is a bug, for the log; the stream ends INTERNAL. */
  onInternalError?(error: unknown): void;
}

export type RlqsEvent =
  | { kind: 'stream'; open: number }
  | {
      kind: 'report';
      buckets: number;
      allowed: number;
      denied: number;
      actions: readonly BucketAction[];
    }
  | { kind: 'refused'; reason: 'streams' | 'buckets' | 'reports' | 'invalid' | 'stale' }
  /** Reported allowed requests past their rule's limit in its window (session.ts). */
  | { kind: 'over_admitted'; requests: number };

export interface RlqsService {
  handler: grpc.handleBidiStreamingCall<unknown, unknown>;
  streams(): number;
  /** Buckets held by the open streams. */
  buckets(): number;
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

class InvalidReport extends Error {}

const MAX_ENTRY_BYTES = 1024;
/** A BucketId's entries: the levels of one path through the rules, and more than any rule has. */
const MAX_BUCKET_ENTRIES = 64;

function readUsage(wire: WireUsage, at: number): BucketUsage {
  const bucket = wire.bucket_id?.bucket;
  if (bucket === undefined || Object.keys(bucket).length === 0) {
    throw new InvalidReport(`bucket_quota_usages[${at}].bucket_id is empty`);
  }
  if (Object.keys(bucket).length > MAX_BUCKET_ENTRIES) {
    throw new InvalidReport(
      `bucket_quota_usages[${at}].bucket_id has more than ${MAX_BUCKET_ENTRIES} entries`,
    );
  }
  for (const [key, value] of Object.entries(bucket)) {
    if (key.length + value.length > MAX_ENTRY_BYTES) {
      throw new InvalidReport(
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
    throw new InvalidReport(`bucket_quota_usages[${at}].time_elapsed is negative`);
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
function reportAllowance(perSecond: number): { take(now: number): boolean; lastAt(): number } {
  const burst = perSecond * 5;
  let allowance = burst;
  let last = performance.now();
  return {
    take(now) {
      allowance = Math.min(burst, allowance + ((now - last) / 1000) * perSecond);
      last = now;
      if (allowance < 1) return false;
      allowance -= 1;
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
 * The stream's domain after this message, and its usages; throws InvalidReport, or
 * BucketLimitError for more usages than the stream may hold buckets.
 */
function readReport(
  message: ReportMessage,
  domain: string | undefined,
  maxUsages: number,
): { domain: string; usages: BucketUsage[] } {
  if (message.domain) {
    if (domain !== undefined && domain !== message.domain) {
      throw new InvalidReport(`domain changed from '${domain}' to '${message.domain}'`);
    }
    domain = message.domain;
  }
  if (domain === undefined) throw new InvalidReport('the first report has no domain');
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
  const handler: grpc.handleBidiStreamingCall<unknown, unknown> = (call) => {
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
    const session = options.session(randomUUID());
    const end = serveStream(call, session, options, event, () => {
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
  return { handler, streams: () => open, buckets, close };
}

function serveStream(
  call: grpc.ServerDuplexStream<unknown, unknown>,
  session: Session,
  options: RlqsStreamOptions,
  event: (e: RlqsEvent) => void,
  release: () => void,
): (code: grpc.status, details: string) => void {
  const allowance = reportAllowance(options.maxReportsPerSecond);
  let domain: string | undefined;
  let ended = false;
  let chain = Promise.resolve();
  const end = (code: grpc.status, details: string) => {
    if (ended) return;
    ended = true;
    call.emit('error', { code, details });
  };
  const stale = setInterval(
    () => {
      if (performance.now() - allowance.lastAt() < options.staleMs) return;
      event({ kind: 'refused', reason: 'stale' });
      end(grpc.status.CANCELLED, `no usage report for ${options.staleMs} ms, RLQS_STALE_STREAM`);
    },
    Math.max(100, Math.min(options.staleMs / 2, 10_000)),
  );
  stale.unref();
  let closed = false;
  const closeOnce = () => {
    if (closed) return;
    closed = true;
    ended = true;
    clearInterval(stale);
    void session.close();
    release();
  };
  for (const name of ['close', 'finish', 'cancelled']) call.on(name, closeOnce);
  call.on('error', () => undefined);
  // Envoy closed its side: answer what is in flight, then end with OK.
  call.on('end', () => {
    void chain.then(() => {
      if (ended) return;
      ended = true;
      call.end();
    });
  });

  const answer = async (reported: string, usages: BucketUsage[]) => {
    if (ended) return;
    try {
      const actions = await session.report(reported, usages);
      if (ended) return;
      const allowed = usages.reduce((sum, usage) => sum + usage.allowed, 0);
      const denied = usages.reduce((sum, usage) => sum + usage.denied, 0);
      event({ kind: 'report', buckets: usages.length, allowed, denied, actions });
      call.write({ bucket_action: actions.map(wireAction) });
    } catch (error) {
      if (error instanceof BucketLimitError) {
        event({ kind: 'refused', reason: 'buckets' });
        end(grpc.status.RESOURCE_EXHAUSTED, error.message);
      } else if (error instanceof StoreError || error instanceof NoRulesError) {
        end(grpc.status.UNAVAILABLE, error.message);
      } else {
        options.onInternalError?.(error);
        end(grpc.status.INTERNAL, 'internal error');
      }
    }
  };

  call.on('data', (message: ReportMessage) => {
    if (ended) return;
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
      const tooMany = error instanceof BucketLimitError;
      event({ kind: 'refused', reason: tooMany ? 'buckets' : 'invalid' });
      end(
        tooMany ? grpc.status.RESOURCE_EXHAUSTED : grpc.status.INVALID_ARGUMENT,
        (error as Error).message,
      );
      return;
    }
    domain = report.domain;
    chain = chain.then(() => answer(report.domain, report.usages));
  });
  return end;
}
