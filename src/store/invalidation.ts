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
 *   what the user lacks (docs/redis.md gives the ACL).
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

export function subscribeToRefunds(options: SubscribeOptions): Coherence {
  const { connection, onRefused, prepare } = options;
  const listeners: ((key: string | 'all') => void)[] = [];
  let live = false;
  let generation = 0;
  let closed = false;
  const told = new Set<string>();
  /** Start-up's waits for the first subscription: told once it is live, refused or closed. */
  let waiting: (() => void)[] = [];
  const settle = () => {
    for (const done of waiting) done();
    waiting = [];
  };
  const refuse = (reason: string) => {
    live = false;
    settle();
    if (told.has(reason)) return;
    told.add(reason);
    onRefused(reason);
  };
  const forgetAll = () => {
    generation++;
    for (const listener of listeners) listener('all');
  };

  // Its own connection, in subscriber mode: it queues the SUBSCRIBE until connected, and it
  // subscribes again itself on each new connection (below), so that it knows when it is live.
  const cluster = 'isCluster' in connection && connection.isCluster;
  const subscriber = cluster
    ? (connection as Cluster).duplicate(undefined, { lazyConnect: true, autoResubscribe: false })
    : (connection as Redis).duplicate({
        lazyConnect: true,
        enableOfflineQueue: true,
        autoResubscribe: false,
        maxRetriesPerRequest: null,
      });
  if (cluster) subscriber.on('+node', (node: Redis) => prepare?.(node));
  else prepare?.(subscriber as Redis);
  subscriber.on('error', () => undefined);
  subscriber.on('close', () => {
    live = false;
  });
  subscriber.on('ready', () => {
    if (closed) return;
    subscriber
      .subscribe(GIVEN_BACK_CHANNEL)
      .then(
        // The script's PUBLISH runs as the store's user: try it, since it fails there silently.
        // An empty notice names no key: every process ignores it.
        () => connection.publish(GIVEN_BACK_CHANNEL, ''),
        (error: unknown) => {
          refuse(`the Redis user may not SUBSCRIBE to ${GIVEN_BACK_CHANNEL}: ${message(error)}`);
          return undefined;
        },
      )
      .then(
        (published) => {
          if (published === undefined || closed) return;
          forgetAll();
          live = true;
          settle();
        },
        (error: unknown) =>
          refuse(`the Redis user may not PUBLISH to ${GIVEN_BACK_CHANNEL}: ${message(error)}`),
      );
  });
  subscriber.connect().catch(() => undefined); // failures arrive as 'error' events
  subscriber.on('message', (channel: string, key: string) => {
    if (channel !== GIVEN_BACK_CHANNEL || key === '') return;
    generation++;
    for (const listener of listeners) listener(key);
  });

  return {
    live: () => live,
    generation: () => generation,
    onNotice: (forget) => void listeners.push(forget),
    firstLive(timeoutMs) {
      if (live || closed || told.size > 0) return Promise.resolve();
      return new Promise<void>((resolve) => {
        const timer = setTimeout(resolve, timeoutMs);
        timer.unref();
        waiting.push(() => {
          clearTimeout(timer);
          resolve();
        });
      });
    },
    async close() {
      closed = true;
      live = false;
      settle();
      subscriber.disconnect();
    },
  };
}

function message(error: unknown): string {
  return error instanceof Error ? error.message : String(error);
}
