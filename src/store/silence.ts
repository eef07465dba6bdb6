/**
 * Notices a Redis connection that stopped answering: a stopped server, a partition, a dropped NAT
 * entry. Calls sent on it stay with ioredis until their replies come, long after REDIS_TIMEOUT has
 * answered their callers, and TCP may take a quarter of an hour to give up on the connection, so
 * memory would grow with every call, and the connection would never be found dead. When a call
 * times out while Redis has answered nothing for `silenceMs`, with calls waiting, `reconnect` is
 * called: dropping the connection releases them, and the next connection finds Redis as it is.
 * A server that is merely stalled (a long command) then gets a new connection, and answers on it
 * once it wakes.
 * Slow replies are replies: a Redis that answers late, or answers errors, is not silent.
 */
export interface SilenceWatch {
  /** Counts the call as waiting until Redis answers it or its connection drops it. */
  track<T>(call: Promise<T>): Promise<T>;
  /** A call timed out: reconnects if the connection has been silent for `silenceMs`. */
  timedOut(): void;
}

export function createSilenceWatch(
  silenceMs: number,
  reconnect: (waiting: number) => void,
  /** Told of each call that Redis answered with a reply rather than an error. */
  onAnswer?: () => void,
  now: () => number = () => performance.now(),
): SilenceWatch {
  let waiting = 0;
  let heard = now();
  const settled = () => {
    waiting -= 1;
    heard = now();
  };
  const answered = () => {
    settled();
    onAnswer?.();
  };
  return {
    track(call) {
      waiting += 1;
      call.then(answered, settled);
      return call;
    },
    timedOut() {
      if (waiting === 0 || now() - heard < silenceMs) return;
      heard = now();
      reconnect(waiting);
    },
  };
}
