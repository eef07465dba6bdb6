/**
 * What RLQS tells the metrics: the streams' transport (servers/grpc/rlqsStream.ts) of reports
 * answered, streams opened and closed, and reports refused at a bound; the quota service of
 * requests admitted past a rule's limit.
 */
import type { BucketAction } from './session.js';

export type RlqsEvent =
  | { kind: 'stream'; open: number }
  | {
      kind: 'report';
      buckets: number;
      allowed: number;
      denied: number;
      actions: readonly BucketAction[];
    }
  | {
      kind: 'refused';
      reason:
        | 'streams'
        | 'buckets'
        | 'reports'
        | 'invalid'
        | 'stale'
        | 'queued_bytes'
        | 'queued_bytes_total'
        | 'unread';
    }
  /** Actions sent unasked: buckets held back to a window's end, resumed (session.ts). */
  | { kind: 'resumed'; actions: readonly BucketAction[] }
  /** Reported allowed requests that landed past their rule's limit (charging.ts). */
  | { kind: 'over_admitted'; requests: number };

/** What the metrics read of the open streams, when scraped. */
export interface RlqsGauges {
  streams(): number;
  /** Buckets held by the open streams. */
  buckets(): number;
  /** Bytes of answers queued across the open streams, with the reports waiting for theirs. */
  queuedBytes(): number;
}
