/**
 * What a usage report says of one bucket, and the bucket's demand measured from its reports:
 * requests (allowed plus denied) a second, over spans long enough to mean a rate, smoothed, with
 * the reporting interval learnt on the way.
 */
import type { Bucket } from './buckets.js';

export interface BucketUsage {
  bucket: Bucket;
  /** time_elapsed, in milliseconds; undefined when Envoy left it out. */
  elapsedMs: number | undefined;
  allowed: number;
  denied: number;
}

/** A bucket's demand as measured so far. */
export interface DemandMeter {
  /** The reporting interval, as the reports' time_elapsed shows it; undefined until one is seen. */
  intervalMs: number | undefined;
  /** Requests (allowed plus denied) and time reported since the demand was last measured. */
  pending: { requests: number; elapsedMs: number };
  /** Requests a second, measured over at least DEMAND_SPAN_MS; undefined until then. */
  demand: number | undefined;
}

export function newDemandMeter(): DemandMeter {
  return { intervalMs: undefined, pending: { requests: 0, elapsedMs: 0 }, demand: undefined };
}

/**
 * Demand is measured over at least this long (or one reporting interval, if longer), and over at
 * least DEMAND_REQUESTS requests, then smoothed: Envoy also reports at once for a new bucket and
 * after a changed assignment, a report that covers a few milliseconds says little about a rate, and
 * a bucket of a few requests a second is noisy. A share that swings sends new strategies, each a
 * full token bucket.
 */
const DEMAND_SPAN_MS = 1_000;
/** A span holds at least this many requests, unless it reaches LONGEST_SPAN_MS. */
const DEMAND_REQUESTS = 20;
const LONGEST_SPAN_MS = 10_000;
/** Each span moves the demand this part of the way to what it measured. */
const DEMAND_SMOOTHING = 0.5;
/** Reports shorter than this are not reporting intervals (Envoy's is more than 100 ms). */
const SHORTEST_INTERVAL_MS = 100;

/**
 * Adds a report to the bucket's demand, and learns the reporting interval from it. The requests
 * are taken over `coveredMs`, the time since the bucket's last report as this side saw it (held
 * to the report's time_elapsed and a second): Envoy's whole seconds lose up to one, so that a
 * 5.9 s interval reads 5 s, and an immediate report (0 s) and a periodic one alternate.
 */
export function measureDemand(
  state: DemandMeter,
  usage: BucketUsage,
  coveredMs: number,
  learnsInterval = true,
): number {
  const elapsed = usage.elapsedMs ?? 0;
  if (learnsInterval && elapsed >= SHORTEST_INTERVAL_MS) {
    // Up at once to a longer interval; down slowly, past the odd short report.
    state.intervalMs =
      state.intervalMs === undefined ? elapsed : Math.max(elapsed, state.intervalMs * 0.8);
  }
  state.pending.requests += usage.allowed + usage.denied;
  state.pending.elapsedMs += Math.max(0, coveredMs);
  const span = Math.max(DEMAND_SPAN_MS, state.intervalMs ?? 0);
  const { requests, elapsedMs } = state.pending;
  // A slow bucket is measured over more requests, up to the longest span.
  if (elapsedMs >= span && (requests >= DEMAND_REQUESTS || elapsedMs >= LONGEST_SPAN_MS)) {
    const measured = requests / (elapsedMs / 1000);
    state.demand =
      state.demand === undefined
        ? measured
        : state.demand + DEMAND_SMOOTHING * (measured - state.demand);
    state.pending = { requests: 0, elapsedMs: 0 };
  } else if (state.demand === undefined) {
    // A first estimate, until a whole span has been seen: never more than the reports show over
    // a span. Envoy's immediate report for a new bucket says 0 s (it truncates to whole
    // seconds), and its requests came over up to a second.
    const seconds = Math.max(DEMAND_SPAN_MS, state.pending.elapsedMs) / 1000;
    return state.pending.requests / seconds;
  }
  return state.demand;
}
