import { StoreError } from '../core/errors.js';

/**
 * Bounds a store call by REDIS_TIMEOUT without counting the service's own lateness.
 *
 * Node runs expired timers before it reads sockets in each turn of its event loop. When the loop
 * runs late (a busy or frozen process, a long GC), a reply that arrived in time waits in the
 * socket while the call's timer has also expired, and a plain timer would fail that call first.
 * So when the timer fires, the verdict waits for `setImmediate`, which runs after this turn has
 * read every socket that is ready: a reply already there settles the call, and only a call that
 * Redis has still not answered times out. A stalled Redis is therefore answered within the
 * timeout plus one turn of the loop.
 */
export function withDeadline<T>(
  call: Promise<T>,
  timeoutMs: number,
  onTimeout?: () => void,
): Promise<T> {
  return new Promise<T>((resolve, reject) => {
    let settled = false;
    const timer = setTimeout(() => {
      setImmediate(() => {
        if (settled) return;
        settled = true;
        onTimeout?.();
        reject(
          new StoreError(
            `redis: timed out: no answer within ${timeoutMs} ms (REDIS_TIMEOUT)`,
            'timeout',
          ),
        );
      });
    }, timeoutMs);
    call.then(
      (value) => {
        if (settled) return;
        settled = true;
        clearTimeout(timer);
        resolve(value);
      },
      (error: unknown) => {
        if (settled) return;
        settled = true;
        clearTimeout(timer);
        reject(error);
      },
    );
  });
}
