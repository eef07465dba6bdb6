import type { Check, Decision, HeaderReader } from '../core/check.js';
import { InvalidRequestError, NoRulesError, StoreError } from '../core/errors.js';
import type { Logger } from '../core/logger.js';
import { createMetrics, type Metrics, type RpcOutcome } from './metrics.js';
import type { CheckEvent } from '../decision/outcome.js';
import type { LocalCacheStats } from '../store/overLimitCache.js';
import { createStatsd, withStatsd, type StatsdSettings } from './statsd.js';
import type { Lookup } from './statsdAddress.js';
import { createTracing, type Tracing } from './tracing.js';

/**
 * Everything that watches checks, behind one part: Prometheus (with statsd beside it when
 * USE_STATSD is on), tracing, and the log of store failures. The service gives it each check's
 * event and each call's latency; it closes its own senders.
 */
export interface Observability {
  /** Prometheus, and statsd when it is on: what the service's other parts count into. */
  metrics: Metrics;
  /** Called once per check by the limiter. */
  observe(event: CheckEvent): void;
  /** One check from either server: traced in the caller's trace, and timed by its outcome. */
  checks(decide: (check: Check) => Promise<Decision>): CheckRunner;
  /** The reference's local-cache gauges, when that cache is on. */
  localCache(read: () => LocalCacheStats): void;
  /** A last flush of tracing and statsd, each bounded, side by side. */
  close(): Promise<void>;
}

export type CheckRunner = <C>(
  check: Check,
  headers: C,
  readHeader: HeaderReader<C>,
) => Promise<Decision>;

/** The settings observability reads. */
export interface ObservabilitySettings {
  metrics: { maxDetailedSeries: number };
  compatMode: 'off' | 'reference';
  /** USE_STATSD=true: the reference's statsd output. */
  statsd: StatsdSettings | undefined;
  /** Named in the log of store failures. */
  failureMode: string;
}

export interface ObservabilityOptions {
  settings: ObservabilitySettings;
  logger: Logger;
  /** The OTEL_* variables for tracing. */
  env: Record<string, string | undefined>;
  /** Where checks are counted; a new registry by default. */
  metrics?: Metrics;
  /** How statsd looks STATSD_HOST up; node:dns's `lookup` by default. */
  statsdLookup?: Lookup;
}

export function createObservability(options: ObservabilityOptions): Observability {
  const { settings, logger } = options;
  const base =
    options.metrics ??
    createMetrics({
      maxDetailedSeries: settings.metrics.maxDetailedSeries,
      referenceLabels: settings.compatMode === 'reference',
    });
  const statsd =
    settings.statsd &&
    createStatsd(settings.statsd, {
      maxDetailedSeries: settings.metrics.maxDetailedSeries,
      onError: (error) =>
        logger.warn({ err: error }, 'statsd: sending stats failed; they are dropped meanwhile'),
      onDroppedFlush: () => base.statsdFlushDropped(),
      lookup: options.statsdLookup,
    });
  const metrics = withStatsd(base, statsd);
  const tracing = createTracing({ env: options.env });
  const logStoreError = storeErrorLog(logger, settings.failureMode);
  return {
    metrics,
    observe(event) {
      metrics.observe(event);
      tracing.observe(event);
      if (event.storeError) logStoreError(event.storeError);
    },
    checks: (decide) => checkRunner(decide, metrics, tracing),
    localCache(read) {
      metrics.localCache(read);
      statsd?.localCache(read);
    },
    async close() {
      // Each bounds its own wait (half a second), and they wait side by side.
      await Promise.all([tracing.shutdown(), statsd?.close()]);
    },
  };
}

function checkRunner(
  decide: (check: Check) => Promise<Decision>,
  metrics: Metrics,
  tracing: Tracing,
): CheckRunner {
  return async (check, headers, readHeader) => {
    const started = performance.now();
    let outcome: RpcOutcome = 'internal';
    try {
      // Untraced, a check costs no closure: neither its run nor its header reader is made.
      const decision = await (tracing.enabled
        ? tracing.traceCheck(
            () => decide(check),
            (name) => readHeader(headers, name),
          )
        : decide(check));
      outcome = decision.code === 'OK' ? 'ok' : 'over_limit';
      return decision;
    } catch (error) {
      if (error instanceof InvalidRequestError) outcome = 'invalid';
      else if (error instanceof StoreError || error instanceof NoRulesError)
        outcome = 'unavailable';
      throw error;
    } finally {
      metrics.observeLatency((performance.now() - started) / 1000, outcome);
    }
  };
}

/** An outage under load fails every check: one line a second says so, with how many it stands for. */
function storeErrorLog(logger: Logger, failureMode: string): (error: StoreError) => void {
  let lastLine = 0;
  let unlogged = 0;
  return (error) => {
    const now = Date.now();
    if (now - lastLine < 1_000) {
      unlogged += 1;
      return;
    }
    logger.warn(
      { kind: error.kind, failureMode, alsoFailedSinceLastLine: unlogged },
      error.message,
    );
    lastLine = now;
    unlogged = 0;
  };
}
