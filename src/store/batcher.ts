import type { BatchedDecide } from './script.js';
import type { CounterCheck, StoreDecision } from './Store.js';

/**
 * Decide calls made in the same turn of the event loop, sent as one script call.
 *
 * Requests that arrive together (many streams read from one socket, or many connections ready at
 * once) are queued until the loop has handled every ready event (`setImmediate`), then go to
 * Redis as one batch call of at most `limit` requests. Each batch is written at once and waits
 * only for its own reply under its own REDIS_TIMEOUT: unlike ioredis's auto-pipelining, a batch
 * never waits for an earlier one to be answered. One request on its own is sent as a plain call.
 */
export interface BatcherOptions {
  /** The most requests in one call; 1 sends every request on its own. */
  limit: number;
  /**
   * How long the first request of a batch waits for others (REDIS_BATCH_WINDOW), in ms; 0: only
   * for the rest of the event loop's turn. Node's timers wait at least 1 ms.
   */
  windowMs?: number;
  sendOne(checks: readonly CounterCheck[], nowMs: number | undefined): Promise<StoreDecision>;
  /** Resolves with each request's decision, or the error of a request that failed alone. */
  sendBatch(requests: readonly BatchedDecide[]): Promise<(StoreDecision | Error)[]>;
}

interface Queued extends BatchedDecide {
  resolve(decision: StoreDecision): void;
  reject(error: unknown): void;
}

export function createBatcher(options: BatcherOptions) {
  const { limit, sendOne, sendBatch } = options;
  const windowMs = options.windowMs ?? 0;
  let queue: Queued[] = [];
  let scheduled = false;

  const send = (batch: Queued[]): void => {
    const [only] = batch;
    if (batch.length === 1 && only) {
      sendOne(only.checks, only.nowMs).then(only.resolve, only.reject);
      return;
    }
    sendBatch(batch).then(
      (decisions) => {
        batch.forEach((queued, i) => {
          const decided = decisions[i];
          if (decided instanceof Error) queued.reject(decided);
          else if (decided !== undefined) queued.resolve(decided);
          else queued.reject(new Error('ERR the batch reply lacks a request'));
        });
      },
      (error: unknown) => {
        for (const queued of batch) queued.reject(error);
      },
    );
  };

  const flush = (): void => {
    scheduled = false;
    const batch = queue;
    queue = [];
    if (batch.length > 0) send(batch);
  };

  return function decide(
    checks: readonly CounterCheck[],
    nowMs: number | undefined,
  ): Promise<StoreDecision> {
    if (limit <= 1) return sendOne(checks, nowMs);
    return new Promise((resolve, reject) => {
      queue.push({ checks, nowMs, resolve, reject });
      if (queue.length >= limit) {
        const full = queue;
        queue = [];
        send(full);
      } else if (!scheduled) {
        scheduled = true;
        if (windowMs > 0) setTimeout(flush, windowMs);
        else setImmediate(flush);
      }
    });
  };
}
