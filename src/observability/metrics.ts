/**
 * Prometheus metrics on a private registry: what each series counts, and the observations that
 * count it. With metricsSeries.ts, which defines the series, the only module that imports
 * prom-client.
 *
 * The `ratelimit_service_*` series have the names and labels that envoyproxy/ratelimit exposes
 * through its default statsd-exporter mapping, so dashboards built for it keep working.
 *
 * Per rule (counters, labels `domain`, `key1`, `key2`; incremented by the descriptor's cost):
 * - `ratelimit_service_rate_limit_total_hits`: every hit on the rule.
 * - `ratelimit_service_rate_limit_total_negative_hits`: hits given back to the rule
 *   (is_negative_hits), counted here alone and in no other series.
 * - `ratelimit_service_rate_limit_over_limit`: hits the counter could not take.
 * - `ratelimit_service_rate_limit_within_limit`: hits within the limit.
 * - `ratelimit_service_rate_limit_near_limit`: hits within the limit that left the counter at or
 *   above NEAR_LIMIT_RATIO of it (also counted in within_limit).
 * - `ratelimit_service_rate_limit_shadow_mode`: over-limit hits that shadow mode let through
 *   (also counted in over_limit).
 * - `ratelimit_service_rate_limit_over_limit_with_local_cache`: over-limit hits answered from the
 *   local cache, under COMPAT_MODE=reference. In that mode the hits are split among these series
 *   as the reference splits them (see referenceCounts.ts).
 *
 * `key1` and `key2` come from the reference's stats key, `DOMAIN.PART1.PART2...`, each part `key`
 * or `key_value`: `key1` is the first part and `key2` the second (`""` for a one-level rule). The
 * reference's mapping drops deeper parts; here parts 2 and beyond are joined by '.' into `key2`, so
 * a three-level rule keeps its own series (but for COMPAT_MODE=reference, see referenceLabels).
 *
 * Descriptor-valued keys (detailed_metric, value_to_metric) are capped: at most
 * METRICS_MAX_DETAILED_SERIES distinct label sets in total. Past that, their hits go to one series
 * per domain, `{domain="D",key1="_overflow",key2=""}`, and each such outcome is counted in
 * `tollgate_metrics_detailed_overflow_total`.
 *
 * Service (the reference's names):
 * - `ratelimit_service_total_requests{grpc_method="ShouldRateLimit"}`: RPCs answered.
 * - `ratelimit_service_response_time_seconds{grpc_method="ShouldRateLimit"}`: RPC latency.
 * - `ratelimit_service_should_rate_limit_error{err_type}`: store failures, by StoreError kind
 *   (timeout, connection, unavailable, ...).
 * - `ratelimit_service_global_shadow_mode`: denials that global SHADOW_MODE turned into OK.
 * - `ratelimit_service_config_load_success`, `ratelimit_service_config_load_error`: rules loads.
 *
 * tollgate's own:
 * - `tollgate_check_duration_seconds{outcome}`: RPC latency by answer: ok, over_limit, invalid,
 *   unavailable, internal.
 * - `tollgate_store_duration_seconds`: time in the store, for checks that called it.
 * - `tollgate_store_errors_total{kind}`: store failures, by StoreError kind.
 * - `tollgate_domain_not_found_total`: checks for a domain without rules. No domain label: clients
 *   choose the domain, so it would be unbounded.
 * - `tollgate_config_loads_total{result="success"|"error"}`: rules loads and reloads.
 * - `tollgate_metrics_detailed_overflow_total`: rule outcomes reported under `_overflow`.
 * - `tollgate_over_limit_cache_hits_total`: checks denied from the over-limit cache, without a
 *   store call.
 * - `tollgate_bounds_reached_total{bound}`: what the server's bounds refused or ended, by bound:
 *   grpc_connections, grpc_calls, grpc_receiving_bytes, grpc_call_timeout, grpc_connection_age,
 *   grpc_connection_idle, grpc_peer_resets, grpc_health_watches,
 *   http_connections, http_rlconfig (requests at once),
 *   rlqs_streams, rlqs_buckets, rlqs_reports, rlqs_queued_bytes, rlqs_stale.
 * - `tollgate_statsd_dropped_flushes_total`: statsd flushes that lost stats (USE_STATSD).
 * - `ratelimit_localcache_*`: under COMPAT_MODE=reference with its local cache, the reference's
 *   eight gauges of it (see store/overLimitCache.ts's LocalCacheStats).
 * - `tollgate_workers`: service processes serving: 1 in each, so the cluster's sum counts them.
 * - `tollgate_worker_restarts_total`: under WORKERS > 1, workers that exited and were replaced
 *   (counted by the cluster primary).
 * - `tollgate_process_*`, `tollgate_nodejs_*`: prom-client's process and Node.js metrics.
 *
 * Under WORKERS > 1 each worker counts in its own registry, and /metrics answers the sum of every
 * worker's `snapshot()`, made by `createMetricsAggregator` in the cluster primary.
 */

import {
  AggregatorRegistry,
  Counter,
  Registry,
  collectDefaultMetrics,
  type MetricObjectWithValues,
  type MetricValue,
} from 'prom-client';
import {
  addLocalCacheGauges,
  createBoundsReached,
  createCheckCounters,
  createProcessSeries,
  createRequestSeries,
  createRlqsSeries,
  createRuleCounters,
  createRulesLoadSeries,
  createStoreSeries,
  record,
  registerSeries,
  type Bound,
  type CheckCounters,
  type RequestSeries,
  type RpcOutcome,
  type RuleCounters,
  type RuleSeries,
  type RulesLoadSeries,
  type RlqsActionLabel,
  type Series,
  type StoreSeries,
} from './metricsSeries.js';
import type { BucketAction } from '../rlqs/session.js';
import type { RlqsEvent } from '../rlqs/events.js';
import { splitHits, type CheckEvent, type RuleOutcome } from '../decision/outcome.js';
import type { LocalCacheStats } from '../store/overLimitCache.js';

export { LOCAL_CACHE_GAUGES, type Bound, type RpcOutcome } from './metricsSeries.js';

export interface MetricsOptions {
  /** Distinct label sets for descriptor-valued keys, in total (METRICS_MAX_DETAILED_SERIES). */
  maxDetailedSeries: number;
  /**
   * COMPAT_MODE=reference: `key2` is the second part only, as the reference's mapping has it,
   * so that the series of a rule three levels deep fall into its parent's.
   */
  referenceLabels?: boolean;
  /** prom-client's process and Node.js metrics, prefixed `tollgate_`. Default true. */
  defaultMetrics?: boolean;
}

export interface Metrics {
  /** The limiter's CheckObserver: one call per check. Cheap, and never throws. */
  observe(event: CheckEvent): void;
  /** One call per ShouldRateLimit RPC, whatever its answer. */
  observeLatency(seconds: number, outcome: RpcOutcome): void;
  /** A request refused as malformed before any decision: counted, with no latency to record. */
  invalidRequest(): void;
  /** One call per rules load or reload. */
  configLoad(ok: boolean): void;
  /**
   * The rules in force came from `source` at `version` (xDS): an info gauge, not a label. The
   * caller bounds `version`, the management server's free text.
   */
  rulesVersion(source: string, version: string): void;
  /** A server bound refused or ended a connection or a call. */
  boundReached(bound: Bound): void;
  /** A statsd flush lost packets (USE_STATSD): no connection, or a server that reads nothing. */
  statsdFlushDropped(): void;
  /**
   * The reference's local cache (COMPAT_MODE=reference): its gauges, as the reference's statsd
   * exporter names them, `ratelimit_localcache_hitCount` and the rest, read at each scrape.
   */
  localCache(read: () => LocalCacheStats): void;
  /** Where the RLQS gauges (streams and buckets open) read from, at each scrape. */
  rlqsStreams(read: { streams(): number; buckets(): number }): void;
  /** What the RLQS streams report and are told. */
  rlqs(event: RlqsEvent): void;
  /** The Content-Type of `text()`. */
  readonly contentType: string;
  /** The text exposition, for GET /metrics. */
  text(): Promise<string>;
  /** Every series as plain data, which survives IPC: what a worker hands the cluster primary. */
  snapshot(): Promise<MetricsSnapshot>;
  readonly registry: Registry;
}

export type MetricsSnapshot = MetricObjectWithValues<MetricValue<string>>[];

/** The name of the series that descriptor-valued keys fall into past the cap. */
export const OVERFLOW_KEY = '_overflow';

export function createMetrics(options: MetricsOptions): Metrics {
  const registry = new Registry();
  if (options.defaultMetrics ?? true) {
    collectDefaultMetrics({ register: registry, prefix: 'tollgate_' });
  }
  const s: Series = {
    rules: createRuleCounters(options.maxDetailedSeries, options.referenceLabels ?? false),
    checks: createCheckCounters(),
    requests: createRequestSeries(),
    store: createStoreSeries(),
    loads: createRulesLoadSeries(),
    boundsReached: createBoundsReached(),
    process: createProcessSeries(),
    rlqs: createRlqsSeries(),
  };
  registerSeries(registry, s);

  return {
    observe(event: CheckEvent): void {
      try {
        countRules(s.rules, event.rules);
        countStore(s.store, event);
        countCheck(s.checks, event);
      } catch {
        // Metrics must never fail a check; a malformed event is dropped.
      }
    },
    observeLatency: (seconds, outcome) => recordLatency(s.requests.pending, seconds, outcome),
    boundReached: (bound) => s.boundsReached.labels(bound).inc(),
    statsdFlushDropped: () => s.process.statsdDropped.inc(),
    localCache: (read) => addLocalCacheGauges(registry, read),
    rlqsStreams(read) {
      s.rlqs.read = read;
    },
    rlqs(event) {
      if (event.kind === 'report') {
        s.rlqs.reports.inc();
        s.rlqs.requests.labels('allowed').inc(event.allowed);
        s.rlqs.requests.labels('denied').inc(event.denied);
        for (const action of event.actions) s.rlqs.assignments.labels(actionLabel(action)).inc();
      } else if (event.kind === 'resumed') {
        for (const action of event.actions) s.rlqs.assignments.labels(actionLabel(action)).inc();
      } else if (event.kind === 'refused') {
        if (event.reason === 'invalid') {
          s.requests.pending.requests += 1;
          s.requests.invalidRequests.inc();
        } else {
          s.boundsReached.labels(`rlqs_${event.reason}`).inc();
        }
      } else if (event.kind === 'over_admitted') {
        s.rlqs.overAdmitted.inc(event.requests);
      }
    },
    invalidRequest(): void {
      s.requests.pending.requests += 1;
      s.requests.invalidRequests.inc();
    },
    rulesVersion(source: string, version: string): void {
      s.loads.rulesInfo.reset();
      s.loads.rulesInfo.labels(source, version).set(1);
    },
    configLoad: (ok) => countConfigLoad(s.loads, ok),
    contentType: registry.contentType,
    text: () => registry.metrics(),
    snapshot: () => registry.getMetricsAsJSON(),
    registry,
  };
}

function actionLabel(action: BucketAction): RlqsActionLabel {
  if (action.kind === 'abandon') return 'abandon';
  if (action.strategy.kind === 'token_bucket') return 'token_bucket';
  return action.strategy.rule === 'DENY_ALL' ? 'deny_all' : 'allow_all';
}

/** Adds each outcome's hits to its rule's series; a cost that is not a count is skipped. */
function countRules(rules: RuleCounters, outcomes: readonly RuleOutcome[]): void {
  for (const rule of outcomes) {
    const hits = rule.hits;
    if (!(hits >= 0 && hits <= Number.MAX_SAFE_INTEGER)) continue;
    const s = seriesOf(rules, rule);
    if (rule.givenBack) {
      s.negativeHits += hits;
      continue;
    }
    const counts = splitHits(rule);
    s.totalHits += hits;
    s.overLimit += counts.over;
    s.withinLimit += counts.within;
    s.nearLimit += counts.near;
    s.shadowMode += counts.shadow;
    s.localCache += counts.localCache;
  }
}

/** The rule's series, made at its first outcome; past the cap, detailed keys go to `_overflow`. */
function seriesOf(rules: RuleCounters, rule: RuleOutcome): RuleSeries {
  const key = rule.metricKey;
  const key1 = key[0] ?? '';
  // Two levels map as the reference does; deeper parts join key2 rather than being lost,
  // unless the reference's series are asked for as they are.
  const key2 = key.length <= 2 || rules.referenceLabels ? (key[1] ?? '') : key.slice(1).join('.');
  const known = findSeries(rules, rule.domain, key1, key2);
  if (known !== undefined) return known;
  if (!rule.detailed) return addSeries(rules, rule.domain, key1, key2);
  if (rules.detailed < rules.maxDetailed) {
    rules.detailed++;
    return addSeries(rules, rule.domain, key1, key2);
  }
  rules.detailedOverflow.inc();
  return (
    findSeries(rules, rule.domain, OVERFLOW_KEY, '') ??
    addSeries(rules, rule.domain, OVERFLOW_KEY, '')
  );
}

function findSeries(
  rules: RuleCounters,
  domain: string,
  key1: string,
  key2: string,
): RuleSeries | undefined {
  return rules.byLabels.get(domain)?.get(key1)?.get(key2);
}

function addSeries(rules: RuleCounters, domain: string, key1: string, key2: string): RuleSeries {
  const s: RuleSeries = {
    labels: { domain, key1, key2 },
    totalHits: 0,
    negativeHits: 0,
    overLimit: 0,
    nearLimit: 0,
    withinLimit: 0,
    shadowMode: 0,
    localCache: 0,
  };
  let byKey1 = rules.byLabels.get(domain);
  if (byKey1 === undefined) rules.byLabels.set(domain, (byKey1 = new Map()));
  let byKey2 = byKey1.get(key1);
  if (byKey2 === undefined) byKey1.set(key1, (byKey2 = new Map()));
  byKey2.set(key2, s);
  rules.series.push(s);
  return s;
}

function countCheck(checks: CheckCounters, event: CheckEvent): void {
  if (event.unknownDomain) checks.domainNotFound.inc();
  if (event.globalShadow) checks.globalShadowMode.inc();
  if (event.overLimitCache === true) checks.overLimitCacheHits.inc();
}

/** One RPC answered; a latency that is not a duration is not recorded. */
function recordLatency(
  pending: RequestSeries['pending'],
  seconds: number,
  outcome: RpcOutcome,
): void {
  pending.requests += 1;
  if (!(seconds >= 0 && Number.isFinite(seconds))) return;
  record(pending.responseTimes, seconds);
  const byOutcome = pending.checkDurations.get(outcome);
  if (byOutcome !== undefined) record(byOutcome, seconds);
}

/** A check's store failure, if any, and its time in the store if it called it. */
function countStore(store: StoreSeries, event: CheckEvent): void {
  if (event.storeError !== undefined) countStoreError(store, event.storeError.kind);
  if (event.storeMs > 0 || event.storeError !== undefined) {
    record(store.pendingDurations, Math.max(0, event.storeMs) / 1000);
  }
}

/** A store failure, under the reference's name and tollgate's; each kind's pair is bound once. */
function countStoreError(store: StoreSeries, kind: string): void {
  let children = store.errorChildren.get(kind);
  if (children === undefined) {
    children = [store.shouldRateLimitError.labels(kind), store.storeErrors.labels(kind)];
    store.errorChildren.set(kind, children);
  }
  for (const child of children) child.inc();
}

function countConfigLoad(loads: RulesLoadSeries, ok: boolean): void {
  if (ok) {
    loads.configLoadSuccess.inc();
    loads.loadSuccess.inc();
  } else {
    loads.configLoadError.inc();
    loads.loadError.inc();
  }
}

export interface MetricsAggregator {
  /** The primary replaced a worker that exited. */
  countRestart(): void;
  /**
   * A worker has exited: the counters and histograms of its last snapshot stay in every later
   * sum, so that a replaced worker never makes a counter go backwards (which Prometheus would
   * read as a reset). Its gauges go with it.
   */
  retire(last: MetricsSnapshot): void;
  /** One exposition from the live workers' snapshots and the retired ones. */
  exposition(live: readonly MetricsSnapshot[]): Promise<{ contentType: string; body: string }>;
}

/**
 * For the cluster primary. prom-client's aggregator adds counters and histograms up, label set by
 * label set; process metrics follow its rules (CPU and memory summed, event-loop lag averaged,
 * start time left out). Its own IPC (`clusterMetrics`) reads the global registry, which this
 * service does not use, so workers send `snapshot()`s over the cluster's channel instead.
 */
export function createMetricsAggregator(): MetricsAggregator {
  // One folded snapshot, however many workers have come and gone; a chain keeps folds in order.
  let retired: Promise<MetricsSnapshot> = Promise.resolve([]);
  // The primary's own series, added to the workers' sum.
  const own = new Registry();
  const restarts = new Counter({
    name: 'tollgate_worker_restarts_total',
    help: 'Workers that exited and were replaced by the cluster primary.',
    registers: [own],
  });
  const aggregate = (snapshots: readonly MetricsSnapshot[]) =>
    AggregatorRegistry.aggregate<typeof Registry.PROMETHEUS_CONTENT_TYPE>([...snapshots]);
  return {
    countRestart: () => restarts.inc(),
    retire(last) {
      const monotonic = last.filter((metric) => {
        const type: unknown = metric.type;
        return type === 'counter' || type === 'histogram';
      });
      retired = retired.then(async (previous) => {
        try {
          return await aggregate([previous, monotonic]).getMetricsAsJSON();
        } catch {
          // Losing one worker's past counts is better than failing every later scrape.
          return previous;
        }
      });
    },
    async exposition(live) {
      const registry = aggregate([await retired, ...live, await own.getMetricsAsJSON()]);
      return { contentType: registry.contentType, body: await registry.metrics() };
    },
  };
}
