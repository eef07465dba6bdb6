/**
 * A scrape flood must not starve checks: /metrics builds one exposition at a time, shared by every
 * scrape waiting for it, and spaces its builds by their cost.
 */

/** How a metrics exposition is shared by scrapes; see `shareBuilds`. */
export interface ShareOptions {
  /** The next build starts no sooner than this many times the last build's duration after it. */
  pauseFactor?: number;
  /** The longest pause between builds, in ms. */
  maxPauseMs?: number;
  /** Milliseconds; performance.now by default. */
  clock?: () => number;
  /** Waits `ms`; setTimeout by default. */
  sleep?: (ms: number) => Promise<void>;
}

/** Builds take at most a tenth of the time, however many scrapes come; a pause is at most 1 s. */
export const PAUSE_FACTOR = 9;
export const MAX_PAUSE_MS = 1_000;

const sleepFor = (ms: number) => new Promise<void>((resolve) => setTimeout(resolve, ms).unref?.());

/**
 * `build`, shared. A caller gets the result of a build that started after it called, so that a
 * scrape shows every check answered before it was asked: callers that come during a build share
 * the next one. Builds run one at a time, and the next starts no sooner than `pauseFactor` times
 * the last one's duration after it ended (at most `maxPauseMs`). A failed build fails the callers
 * that shared it, and the next caller starts another.
 */
export function shareBuilds<T>(
  build: () => Promise<T>,
  options: ShareOptions = {},
): () => Promise<T> {
  const clock = options.clock ?? (() => performance.now());
  const sleep = options.sleep ?? sleepFor;
  const factor = options.pauseFactor ?? PAUSE_FACTOR;
  const maxPause = options.maxPauseMs ?? MAX_PAUSE_MS;
  /** The latest build, and the one not yet started (which a new caller joins) if any. */
  let latest: Promise<T> | undefined;
  let queued: Promise<T> | undefined;
  /** When the next build may start. */
  let readyAt = -Infinity;

  return () => {
    if (queued !== undefined) return queued;
    const before = latest;
    const promise = (async () => {
      // Always a wait, so that `queued` is set below before this goes on.
      await before?.then(ignore, ignore);
      const wait = readyAt - clock();
      if (wait > 0) await sleep(wait);
      queued = undefined;
      const started = clock();
      try {
        return await build();
      } finally {
        const ended = clock();
        readyAt = ended + Math.min(maxPause, factor * (ended - started));
      }
    })();
    queued = promise;
    latest = promise;
    return promise;
  };
}

const ignore = (): void => undefined;
