/** RLQS's settings: what an unmatched bucket is told, and the bounds of long-lived streams. */
export interface RlqsSettings {
  /** RLQS_UNMATCHED_ACTION: the blanket rule for a bucket that matches no rule. */
  unmatched: 'allow' | 'deny';
  /** RLQS_MAX_STREAMS: streams open at once, in this process. */
  maxStreams: number;
  /** RLQS_MAX_BUCKETS_PER_STREAM: buckets one stream may hold. */
  maxBucketsPerStream: number;
  /** RLQS_MAX_REPORTS_PER_SECOND: usage reports per second per stream, over a 5 s burst. */
  maxReportsPerSecond: number;
  /**
   * RLQS_MAX_BUCKET_REPORTS_PER_SECOND: bucket usages per second per stream, over a 5 s burst
   * (each is store work), at least RLQS_MAX_BUCKETS_PER_STREAM in the burst.
   */
  maxBucketReportsPerSecond: number;
  /** RLQS_STALE_STREAM: a stream with no report for this long is ended. */
  staleMs: number;
  /** RLQS_MAX_QUEUED_BYTES: bytes of answers a stream's client has not taken yet. */
  maxQueuedBytes: number;
  /** RLQS_MAX_QUEUED_BYTES_TOTAL: the same bytes across the process's streams. */
  maxQueuedBytesTotal: number;
  /** RLQS_UNREAD_TIMEOUT: how long an answer may wait for its client to take it. */
  unreadMs: number;
  /** RLQS_ASSIGNMENT_TTL_FLOOR: the least time to live of an assignment. */
  ttlFloorMs: number;
  /** RLQS_MAX_CONSUMERS_PER_POOL: buckets across streams that one rule's counter is shared by. */
  maxConsumersPerPool: number;
}
