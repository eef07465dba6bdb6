import type { Cluster, Redis } from 'ioredis';

/**
 * Keeps the caches of every process on one Redis from denying what a refund freed.
 *
 * The over-limit cache and the local cache answer a denial from memory because a counter's count
 * only grows until its reset. A refund (is_negative_hits) lowers it, on whichever process or
 * instance received the refund; every other one must forget the counter. So the decision code
 * publishes each given-back key on GIVEN_BACK_CHANNEL, in the same atomic step that gives it
 * back (lua/dispatch.lua), and each process with a cache subscribes and forgets the keys it hears.
 *
 * - A cached denial is answered only while the subscription is live. Subscribed again after any
 *   loss of the connection, a process forgets everything first: notices sent meanwhile are lost.
 * - A reply that was under way when a notice arrived may hold a count from before the refund, so
 *   a request that started before the latest notice teaches the cache nothing (`generation`).
 * - What remains is the time a notice takes to arrive: a denial answered from memory in that time
 *   is one the store would have made a moment earlier.
 * - A Redis user that may not SUBSCRIBE, or not PUBLISH (the script's PUBLISH is then refused
 *   without failing the refund), keeps the caches from answering at all, with one warning naming
 *   what the user lacks (docs/redis.md gives the ACL); it is tried again every 5 s. Any other
 *   failure is tried again sooner, from 250 ms doubling to 5 s.
 */
export const GIVEN_BACK_CHANNEL = 'tollgate:given-back';

export interface Coherence {
  /** Cached denials may be answered: subscribed, and nothing missed since the cache was emptied. */
  live(): boolean;
  /** Moves on each notice heard: a request that began at another generation learns nothing. */
  generation(): number;
  /** Called for each key some process gave back to; `all` when everything must be forgotten. */
  onNotice(forget: (key: string | 'all') => void): void;
  /**
   * Resolves once first live (or refused, or closed), or after `timeoutMs`: start-up waits for
   * it, so that the caches answer from the first request rather than from a moment after it.
   */
  firstLive(timeoutMs: number): Promise<void>;
  close(): Promise<void>;
}

/** Coherence within one process: its own refunds are all there is (the in-memory store). */
export const SINGLE_PROCESS: Coherence = {
  live: () => true,
  generation: () => 0,
  onNotice: () => undefined,
  firstLive: async () => undefined,
  close: async () => undefined,
};

export interface SubscribeOptions {
  /** The store's connection; the subscriber is a copy of it (same node, user, TLS, database). */
  connection: Redis | Cluster;
  /** Told once per cause when the caches cannot be kept coherent, and so answer nothing. */
  onRefused: (reason: string) => void;
  /** Called with each connection the subscriber makes, before it connects. */
  prepare?: (node: Redis) => void;
}

/** The first wait before trying again after a failure that is not a refusal; it doubles to 5 s. */
const RETRY_MS = 250;
const RETRY_MAX_MS = 5_000;

export function subscribeToRefunds(options: SubscribeOptions): Coherence {
  return new RefundSubscription(options);
}

class RefundSubscription implements Coherence {
  private readonly listeners: ((key: string | 'all') => void)[] = [];
  private isLive = false;
  private heard = 0;
  private closed = false;
  /** The reasons already told, each once. */
  private readonly told = new Set<string>();
  /** Start-up's waits for the first subscription: told once it is live, refused or closed. */
  private waiting: (() => void)[] = [];
  /** The subscriber connection now, and how many times a subscriber connection has closed. */
  private subscriber: Redis | undefined;
  private cuts = 0;
  private failures = 0;
  private timer: NodeJS.Timeout | undefined;

  constructor(private readonly options: SubscribeOptions) {
    this.start();
  }

  live = () => this.isLive;
  generation = () => this.heard;
  onNotice = (forget: (key: string | 'all') => void) => void this.listeners.push(forget);

  firstLive(timeoutMs: number): Promise<void> {
    if (this.isLive || this.closed || this.told.size > 0) return Promise.resolve();
    return new Promise<void>((resolve) => {
      const wait = setTimeout(resolve, timeoutMs);
      wait.unref();
      this.waiting.push(() => {
        clearTimeout(wait);
        resolve();
      });
    });
  }

  async close(): Promise<void> {
    this.closed = true;
    this.isLive = false;
    clearTimeout(this.timer);
    this.settle();
    this.subscriber?.disconnect();
  }

  private settle(): void {
    for (const done of this.waiting) done();
    this.waiting = [];
  }

  private notify(key: string | 'all'): void {
    this.heard++;
    for (const listener of this.listeners) listener(key);
  }

  private later(run: () => void, ms: number): void {
    clearTimeout(this.timer);
    this.timer = setTimeout(run, ms);
    this.timer.unref();
  }

  private backoff(): number {
    return Math.min(RETRY_MS * 2 ** this.failures++, RETRY_MAX_MS);
  }

  /** Whether `node`, seen at `since` cuts, is still the subscription to act on. */
  private current(node: Redis, since: number): boolean {
    return !this.closed && since === this.cuts && node === this.subscriber;
  }

  private start(): void {
    if (this.closed) return;
    const node = subscriberFor(this.options.connection, this.cuts);
    if (node === undefined) {
      this.later(() => this.start(), this.backoff());
      return;
    }
    this.subscriber = node;
    this.options.prepare?.(node);
    node.on('error', () => undefined);
    node.on('ready', () => {
      if (this.current(node, this.cuts)) void this.attempt(node);
    });
    node.on('close', () => {
      if (node !== this.subscriber) return;
      this.isLive = false;
      this.cuts++;
      clearTimeout(this.timer);
    });
    // Ends when it will not reconnect: a cluster node's copy, or one whose retries gave up.
    node.on('end', () => {
      if (!this.closed && node === this.subscriber) this.later(() => this.start(), this.backoff());
    });
    node.on('message', (channel: string, key: string) => {
      if (node === this.subscriber && channel === GIVEN_BACK_CHANNEL && key !== '')
        this.notify(key);
    });
    node.connect().catch(() => undefined); // failures arrive as 'error' events
  }

  /**
   * Subscribes, then tries a PUBLISH as the store's user (the script's PUBLISH runs as that user,
   * and fails there silently). Live once both answer on a connection that has not closed since:
   * everything is forgotten first, since notices sent before were not heard.
   */
  private async attempt(node: Redis): Promise<void> {
    const since = this.cuts;
    let step = 'SUBSCRIBE';
    try {
      await node.subscribe(GIVEN_BACK_CHANNEL);
      step = 'PUBLISH';
      // An empty notice names no key: every process ignores it.
      await this.options.connection.publish(GIVEN_BACK_CHANNEL, '');
    } catch (error) {
      if (this.current(node, since)) this.failed(node, step, message(error));
      return;
    }
    if (!this.current(node, since) || node.status !== 'ready') return;
    this.failures = 0;
    this.notify('all');
    this.isLive = true;
    this.settle();
  }

  private failed(node: Redis, step: string, error: string): void {
    if (!REFUSED.test(error)) {
      this.later(() => void this.attempt(node), this.backoff());
      return;
    }
    const reason = `the Redis user may not ${step} to ${GIVEN_BACK_CHANNEL}: ${error}`;
    if (!this.told.has(reason)) {
      this.told.add(reason);
      this.options.onRefused(reason);
    }
    this.settle();
    // Tried again now and then, quietly: a grant given later is taken up.
    this.later(() => void this.attempt(node), RETRY_MAX_MS);
  }
}

/**
 * The subscriber's own connection, in subscriber mode. On a plain Redis (or Sentinel) a copy of
 * the store's connection, which reconnects as it does. On a Cluster a copy of one node's, the
 * `turn`-th: classic pub/sub reaches every node over the cluster bus, so any node will do, and
 * when that node's connection ends the next is taken. ioredis's own cluster subscriber is not
 * used: it moves to another node and subscribes again unseen, and a notice sent meanwhile is lost.
 */
function subscriberFor(connection: Redis | Cluster, turn: number): Redis | undefined {
  const copy = {
    lazyConnect: true,
    enableOfflineQueue: true,
    autoResubscribe: false,
    maxRetriesPerRequest: null,
  };
  if (!('isCluster' in connection && connection.isCluster)) {
    return (connection as Redis).duplicate(copy);
  }
  const nodes = (connection as Cluster).nodes('all');
  const node = nodes[turn % Math.max(1, nodes.length)];
  return node?.duplicate({ ...copy, retryStrategy: () => null, readOnly: false });
}

/** Errors that a retry will not mend until an operator grants something. */
const REFUSED = /^(NOPERM|NOAUTH|WRONGPASS)/;

function message(error: unknown): string {
  return error instanceof Error ? error.message : String(error);
}
