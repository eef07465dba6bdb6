/**
 * Buckets held back to a window's end, sent their share again when it rolls over. A bucket that
 * a filled window denied (or slowed to what it held of it) would wait for its next report to be
 * told of the new window: up to a reporting interval into it (Envoy's released 5 s is half a
 * 10 s window), admitting nothing meanwhile. So the session names the moment, and once it has
 * passed, the stream sends the bucket's new action unasked (the server may send a response
 * whenever it likes; Envoy applies each bucket action as it comes).
 *
 * One timer per moment: buckets held back to one window's end share it. Timers do not keep the
 * process alive, and `close` cancels them all.
 */

/** Runs `run` after `delayMs`; returns a cancel. */
export type Schedule = (run: () => void, delayMs: number) => () => void;

export const scheduleTimer: Schedule = (run, delayMs) => {
  const timer = setTimeout(run, Math.max(0, delayMs));
  timer.unref();
  return () => clearTimeout(timer);
};

/**
 * How long after a window's end its buckets are resumed: the store decides on its own clock
 * (CLOCK=redis), which may run a little behind this process's, and a charge that lands before
 * the window rolls over there counts in the window that is over.
 */
export const RESUME_SLACK_MS = 50;

export interface Resumer {
  /** Resume bucket `name` once the wall clock passes `atWallMs`. */
  at(name: string, atWallMs: number): void;
  /** Cancels every timer. */
  close(): void;
}

export function createResumer(options: {
  schedule: Schedule;
  wallNow: () => number;
  /** The buckets whose moment `atWallMs` has passed. */
  resume(names: readonly string[], atWallMs: number): void;
}): Resumer {
  const moments = new Map<number, { names: Set<string>; cancel: () => void }>();
  return {
    at(name, atWallMs) {
      let moment = moments.get(atWallMs);
      if (moment === undefined) {
        const names = new Set<string>();
        const cancel = options.schedule(
          () => {
            moments.delete(atWallMs);
            options.resume([...names], atWallMs);
          },
          atWallMs - options.wallNow() + RESUME_SLACK_MS,
        );
        moment = { names, cancel };
        moments.set(atWallMs, moment);
      }
      moment.names.add(name);
    },
    close() {
      for (const { cancel } of moments.values()) cancel();
      moments.clear();
    },
  };
}
