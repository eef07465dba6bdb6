/**
 * Prometheus metrics on a private registry. This is the only module that imports prom-client.
 *
 * The `ratelimit_service_*` series have the names and labels that envoyproxy/ratelimit exposes
 * through its default statsd-exporter mapping, so dashboards built for it keep working.
 *
 * Per rule (counters, labels `domain`, `key1`, `key2`; incremented by the descriptor's cost):
 * - `ratelimit_service_rate_limit_total_hits`: every hit on the rule.
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
 *   grpc_connection_idle,
 *   http_connections.
 * - `tollgate_statsd_dropped_flushes_total`: statsd flushes that lost stats (USE_STATSD).
 * - `ratelimit_localcache_*`: under COMPAT_MODE=reference with its local cache, the reference's
 *   eight gauges of it (see overLimitCache.ts's LocalCacheStats).
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
  Gauge,
  Histogram,
  Registry,
  collectDefaultMetrics,
  type Metric,
  type MetricObjectWithValues,
  type MetricValue,
} from 'prom-client';
import { splitHits, type CheckEvent, type RuleOutcome } from './outcome.js';
import type { LocalCacheStats } from './overLimitCache.js';
import { STORE_ERROR_KINDS } from './store/redisErrors.js';

export type RpcOutcome = 'ok' | 'over_limit' | 'invalid' | 'unavailable' | 'internal';

/** The reference's local-cache gauges, in its order. */
export const LOCAL_CACHE_GAUGES = [
  'evacuateCount',
  'expiredCount',
  'entryCount',
  'averageAccessTime',
  'hitCount',
  'missCount',
  'lookupCount',
  'overwriteCount',
] as const satisfies readonly (keyof LocalCacheStats)[];

/** The server's bounds, as `tollgate_bounds_reached_total` labels them. */
const BOUNDS = [
  'grpc_connections',
  'grpc_calls',
  'grpc_receiving_bytes',
  'grpc_call_timeout',
  'grpc_connection_age',
  'grpc_connection_idle',
  'http_connections',
] as const;
export type Bound = (typeof BOUNDS)[number];

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

/** From a sub-millisecond answer to a slow one; includes every default bucket up to 1 s. */
const LATENCY_BUCKETS = [
  0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1,
];
const RPC_OUTCOMES: readonly RpcOutcome[] = [
  'ok',
  'over_limit',
  'invalid',
  'unavailable',
  'internal',
];
const RULE_LABELS = ['domain', 'key1', 'key2'] as const;

type RuleLabels = Record<(typeof RULE_LABELS)[number], string>;

/**
 * One rule's counts not yet handed to prom-client. `observe` only adds to these numbers; they are
 * moved into the counters when the registry is read, so the hot path does no label hashing.
 */
interface RuleSeries {
  labels: RuleLabels;
  totalHits: number;
  overLimit: number;
  nearLimit: number;
  withinLimit: number;
  shadowMode: number;
  localCache: number;
}

/**
 * Observations of one histogram series not yet handed to prom-client: a count per bucket (the
 * last one past every bound), their sum and their number. prom-client's own `observe` hashes and
 * checks the labels on every call, even on a bound child; this is a bound scan and three adds.
 */
interface PendingHistogram {
  buckets: Float64Array;
  sum: number;
  count: number;
}

const pendingHistogram = (): PendingHistogram => ({
  buckets: new Float64Array(LATENCY_BUCKETS.length + 1),
  sum: 0,
  count: 0,
});

function record(pending: PendingHistogram, seconds: number): void {
  // What prom-client refuses; the callers drop it too.
  if (!Number.isFinite(seconds)) return;
  let i = 0;
  while (i < LATENCY_BUCKETS.length && seconds > (LATENCY_BUCKETS[i] as number)) i++;
  pending.buckets[i] = (pending.buckets[i] as number) + 1;
  pending.sum += seconds;
  pending.count += 1;
}

/** What prom-client 15 keeps for one series of a histogram, which `moveInto` adds to. */
interface HistogramCell {
  labels: object;
  bucketValues: Record<string, number>;
  sum: number;
  count: number;
}

/**
 * Adds the pending observations to the histogram's series for `labels`, as many `observe` calls
 * would. prom-client has no public call that adds a bucket's count, so this writes the series it
 * keeps (after `zero`, which makes the series as an `observe` would); the check below stops at
 * start-up if a prom-client changes that shape.
 */
function moveInto(
  histogram: Histogram<string>,
  labels: Record<string, string>,
  pending: PendingHistogram,
): void {
  if (pending.count === 0) return;
  const cell = histogramCell(histogram, labels);
  LATENCY_BUCKETS.forEach((bound, i) => {
    const n = pending.buckets[i] as number;
    if (n > 0) cell.bucketValues[bound] = (cell.bucketValues[bound] ?? 0) + n;
  });
  cell.sum += pending.sum;
  cell.count += pending.count;
  pending.buckets.fill(0);
  pending.sum = 0;
  pending.count = 0;
}

function histogramCell(
  histogram: Histogram<string>,
  labels: Record<string, string>,
): HistogramCell {
  const cells = (histogram as unknown as { hashMap?: Record<string, HistogramCell> }).hashMap;
  const matches = (cell: HistogramCell) => {
    const own = cell.labels as Record<string, string>;
    const names = Object.keys(labels);
    return names.length === Object.keys(own).length && names.every((n) => own[n] === labels[n]);
  };
  let cell = cells && Object.values(cells).find(matches);
  if (cell === undefined) {
    histogram.zero(labels);
    const made = (histogram as unknown as { hashMap?: Record<string, HistogramCell> }).hashMap;
    cell = made && Object.values(made).find(matches);
  }
  if (
    cell === undefined ||
    typeof cell.sum !== 'number' ||
    typeof cell.count !== 'number' ||
    typeof cell.bucketValues !== 'object'
  ) {
    throw new Error(
      'prom-client keeps histograms in another shape: the latency metrics cannot be kept',
    );
  }
  return cell;
}

export function createMetrics(options: MetricsOptions): Metrics {
  const registry = new Registry();
  if (options.defaultMetrics ?? true) {
    collectDefaultMetrics({ register: registry, prefix: 'tollgate_' });
  }
  const s: Series = {
    rules: createRuleCounters(options),
    checks: createCheckCounters(),
    requests: createRequestSeries(),
    store: createStoreSeries(),
    loads: createRulesLoadSeries(),
    boundsReached: createBoundsReached(),
    process: createProcessSeries(),
  };
  register(registry, s);

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

/** Every series of a registry, by concern. */
interface Series {
  rules: RuleCounters;
  checks: CheckCounters;
  requests: RequestSeries;
  store: StoreSeries;
  loads: RulesLoadSeries;
  boundsReached: Counter<'bound'>;
  process: ProcessSeries;
}

/**
 * Registers every series, in the exposition's order, which interleaves the concerns. Each series
 * is made with `registers: []` (prom-client's default is its global registry), so this list alone
 * decides what /metrics shows and in which order: a series left out of it is not exposed.
 */
function register(registry: Registry, s: Series): void {
  const inOrder: Metric[] = [
    s.rules.totalHits,
    s.rules.overLimit,
    s.rules.nearLimit,
    s.rules.withinLimit,
    s.rules.shadowMode,
    s.rules.localCache,
    s.store.shouldRateLimitError,
    s.loads.configLoadSuccess,
    s.loads.configLoadError,
    s.checks.globalShadowMode,
    s.requests.totalRequests,
    s.requests.responseTime,
    s.requests.checkDuration,
    s.store.storeDuration,
    s.store.storeErrors,
    s.checks.domainNotFound,
    s.loads.configLoads,
    s.loads.rulesInfo,
    s.requests.invalidRequests,
    s.rules.detailedOverflow,
    s.checks.overLimitCacheHits,
    s.boundsReached,
    s.process.statsdDropped,
    s.process.workers,
  ];
  for (const metric of inOrder) registry.registerMetric(metric);
}

type RuleCounter = Counter<(typeof RULE_LABELS)[number]>;

/**
 * The per-rule counters and the counts not yet moved into them: each rule's RuleSeries is in
 * `series` and, by its labels, in `byLabels`. `detailed` counts the label sets that
 * descriptor-valued keys have taken of the cap.
 */
interface RuleCounters {
  totalHits: RuleCounter;
  overLimit: RuleCounter;
  nearLimit: RuleCounter;
  withinLimit: RuleCounter;
  shadowMode: RuleCounter;
  localCache: RuleCounter;
  detailedOverflow: Counter;
  readonly series: RuleSeries[];
  readonly byLabels: Map<string, Map<string, Map<string, RuleSeries>>>;
  detailed: number;
  readonly maxDetailed: number;
  readonly referenceLabels: boolean;
}

function createRuleCounters(options: MetricsOptions): RuleCounters {
  const collect = (): void => flushRules(rules);
  const counter = (name: string, help: string): RuleCounter =>
    new Counter({ name, help, labelNames: RULE_LABELS, registers: [], collect });
  const rules: RuleCounters = {
    totalHits: counter(
      'ratelimit_service_rate_limit_total_hits',
      'Hits on a rule, by the descriptor cost.',
    ),
    overLimit: counter(
      'ratelimit_service_rate_limit_over_limit',
      'Hits on a rule that were over its limit.',
    ),
    nearLimit: counter(
      'ratelimit_service_rate_limit_near_limit',
      'Hits within a rule limit that left it at or above the near-limit ratio.',
    ),
    withinLimit: counter(
      'ratelimit_service_rate_limit_within_limit',
      'Hits on a rule that were within its limit.',
    ),
    shadowMode: counter(
      'ratelimit_service_rate_limit_shadow_mode',
      'Over-limit hits on a rule that shadow mode let through.',
    ),
    localCache: counter(
      'ratelimit_service_rate_limit_over_limit_with_local_cache',
      'Over-limit hits on a rule answered from the local cache (COMPAT_MODE=reference).',
    ),
    detailedOverflow: new Counter({
      name: 'tollgate_metrics_detailed_overflow_total',
      help: 'Rule outcomes reported under key1="_overflow" because the detailed series were capped.',
      registers: [],
    }),
    series: [],
    byLabels: new Map(),
    detailed: 0,
    maxDetailed: options.maxDetailedSeries,
    referenceLabels: options.referenceLabels ?? false,
  };
  return rules;
}

/** Moves the per-rule counts into the counters; any of them calls it when the registry is read. */
function flushRules(rules: RuleCounters): void {
  for (const s of rules.series) {
    if (s.totalHits > 0) rules.totalHits.inc(s.labels, s.totalHits);
    if (s.overLimit > 0) rules.overLimit.inc(s.labels, s.overLimit);
    if (s.nearLimit > 0) rules.nearLimit.inc(s.labels, s.nearLimit);
    if (s.withinLimit > 0) rules.withinLimit.inc(s.labels, s.withinLimit);
    if (s.shadowMode > 0) rules.shadowMode.inc(s.labels, s.shadowMode);
    if (s.localCache > 0) rules.localCache.inc(s.labels, s.localCache);
    s.totalHits = s.overLimit = s.nearLimit = s.withinLimit = s.shadowMode = s.localCache = 0;
  }
}

/** Adds each outcome's hits to its rule's series; a cost that is not a count is skipped. */
function countRules(rules: RuleCounters, outcomes: readonly RuleOutcome[]): void {
  for (const rule of outcomes) {
    const hits = rule.hits;
    if (!(hits >= 0 && hits <= Number.MAX_SAFE_INTEGER)) continue;
    const s = seriesOf(rules, rule);
    const counts = splitHits(rule);
    s.totalHits += hits;
    s.overLimit += counts.over;
    s.withinLimit += counts.within;
    s.nearLimit += counts.near;
    s.shadowMode += counts.shadow;
    s.localCache += counts.localCache;
  }
}

/** The rule's series, made at its first outcome; past the cap, a detailed key's go to `_overflow`. */
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

/** How checks were answered besides their rules' outcomes. */
interface CheckCounters {
  globalShadowMode: Counter;
  domainNotFound: Counter;
  overLimitCacheHits: Counter;
}

function createCheckCounters(): CheckCounters {
  return {
    globalShadowMode: new Counter({
      name: 'ratelimit_service_global_shadow_mode',
      help: 'Over-limit requests that global shadow mode let through.',
      registers: [],
    }),
    domainNotFound: new Counter({
      name: 'tollgate_domain_not_found_total',
      help: 'Checks for a domain that has no rules.',
      registers: [],
    }),
    overLimitCacheHits: new Counter({
      name: 'tollgate_over_limit_cache_hits_total',
      help: 'Checks denied from the over-limit cache, without a store call.',
      registers: [],
    }),
  };
}

function countCheck(checks: CheckCounters, event: CheckEvent): void {
  if (event.unknownDomain) checks.domainNotFound.inc();
  if (event.globalShadow) checks.globalShadowMode.inc();
  if (event.overLimitCache === true) checks.overLimitCacheHits.inc();
}

/** RPCs answered and their latencies, and requests refused as malformed. */
interface RequestSeries {
  totalRequests: Counter<'grpc_method'>;
  responseTime: Histogram<'grpc_method'>;
  checkDuration: Histogram<'outcome'>;
  invalidRequests: Counter;
  /**
   * RPCs and latencies since the registry was last read: plain numbers on the hot path, moved
   * into prom-client by each series' `collect` when it is read.
   */
  pending: {
    requests: number;
    responseTimes: PendingHistogram;
    checkDurations: Map<RpcOutcome, PendingHistogram>;
  };
}

const SHOULD_RATE_LIMIT = { grpc_method: 'ShouldRateLimit' };

function createRequestSeries(): RequestSeries {
  const pending: RequestSeries['pending'] = {
    requests: 0,
    responseTimes: pendingHistogram(),
    checkDurations: new Map(RPC_OUTCOMES.map((o) => [o, pendingHistogram()])),
  };
  const totalRequests = new Counter({
    name: 'ratelimit_service_total_requests',
    help: 'RPCs answered.',
    labelNames: ['grpc_method'] as const,
    registers: [],
    collect() {
      if (pending.requests > 0) requestsChild.inc(pending.requests);
      pending.requests = 0;
    },
  });
  const requestsChild = totalRequests.labels(SHOULD_RATE_LIMIT);
  const responseTime = new Histogram({
    name: 'ratelimit_service_response_time_seconds',
    help: 'RPC latency in seconds.',
    labelNames: ['grpc_method'] as const,
    buckets: LATENCY_BUCKETS,
    registers: [],
    collect() {
      moveInto(this, SHOULD_RATE_LIMIT, pending.responseTimes);
    },
  });
  const checkDuration = new Histogram({
    name: 'tollgate_check_duration_seconds',
    help: 'RPC latency in seconds, by outcome.',
    labelNames: ['outcome'] as const,
    buckets: LATENCY_BUCKETS,
    registers: [],
    collect() {
      for (const [outcome, byOutcome] of pending.checkDurations) {
        moveInto(this, { outcome }, byOutcome);
      }
    },
  });
  const invalidRequests = new Counter({
    name: 'tollgate_invalid_requests_total',
    help: 'Requests refused as malformed (INVALID_ARGUMENT, or HTTP 400 on /json).',
    registers: [],
  });
  return { totalRequests, responseTime, checkDuration, invalidRequests, pending };
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

/** Store failures, under the reference's name and tollgate's, and the time spent in the store. */
interface StoreSeries {
  shouldRateLimitError: Counter<'err_type'>;
  storeErrors: Counter<'kind'>;
  storeDuration: Histogram;
  /** Both error series' children for each kind seen so far. */
  errorChildren: Map<string, Counter.Internal[]>;
  /** Time in the store since the registry was last read, moved in by `collect`. */
  pendingDurations: PendingHistogram;
}

function createStoreSeries(): StoreSeries {
  const pendingDurations = pendingHistogram();
  const storeErrors = new Counter({
    name: 'tollgate_store_errors_total',
    help: 'Store failures, by kind.',
    labelNames: ['kind'] as const,
    registers: [],
  });
  // tollgate's own series of every known kind start at 0, so rate() and alerts see the first error
  // of each kind; the reference's should_rate_limit_error appears at its first, as the reference's.
  for (const kind of STORE_ERROR_KINDS) storeErrors.labels(kind).inc(0);
  return {
    shouldRateLimitError: new Counter({
      name: 'ratelimit_service_should_rate_limit_error',
      help: 'Checks whose store call failed, by error type.',
      labelNames: ['err_type'] as const,
      registers: [],
    }),
    storeErrors,
    storeDuration: new Histogram({
      name: 'tollgate_store_duration_seconds',
      help: 'Time spent in the store per check, in seconds.',
      buckets: LATENCY_BUCKETS,
      registers: [],
      collect() {
        moveInto(this, {}, pendingDurations);
      },
    }),
    errorChildren: new Map(),
    pendingDurations,
  };
}

/** A check's store failure, under both names, and its time in the store if it called it. */
function countStore(store: StoreSeries, event: CheckEvent): void {
  const error = event.storeError;
  if (error !== undefined) {
    let children = store.errorChildren.get(error.kind);
    if (children === undefined) {
      children = [
        store.shouldRateLimitError.labels(error.kind),
        store.storeErrors.labels(error.kind),
      ];
      store.errorChildren.set(error.kind, children);
    }
    for (const child of children) child.inc();
  }
  if (event.storeMs > 0 || error !== undefined) {
    record(store.pendingDurations, Math.max(0, event.storeMs) / 1000);
  }
}

/** Rules loads, under the reference's names and tollgate's, and the rules in force (xDS). */
interface RulesLoadSeries {
  configLoadSuccess: Counter;
  configLoadError: Counter;
  configLoads: Counter<'result'>;
  loadSuccess: Counter.Internal;
  loadError: Counter.Internal;
  rulesInfo: Gauge<'source' | 'version'>;
}

function createRulesLoadSeries(): RulesLoadSeries {
  const configLoads = new Counter({
    name: 'tollgate_config_loads_total',
    help: 'Rules loads and reloads, by result.',
    labelNames: ['result'] as const,
    registers: [],
  });
  const loadSuccess = configLoads.labels('success');
  const loadError = configLoads.labels('error');
  // Known results start at 0, so increase() and alerts see the first error.
  loadSuccess.inc(0);
  loadError.inc(0);
  return {
    configLoadSuccess: new Counter({
      name: 'ratelimit_service_config_load_success',
      help: 'Rules loads that succeeded.',
      registers: [],
    }),
    configLoadError: new Counter({
      name: 'ratelimit_service_config_load_error',
      help: 'Rules loads that failed.',
      registers: [],
    }),
    configLoads,
    loadSuccess,
    loadError,
    rulesInfo: new Gauge({
      name: 'tollgate_rules_info',
      help: 'The rules in force: 1 for their source and version (xDS), one series at a time.',
      labelNames: ['source', 'version'] as const,
      aggregator: 'max',
      registers: [],
    }),
  };
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

/** What the gRPC and HTTP servers' bounds refused or ended; every bound starts at 0. */
function createBoundsReached(): Counter<'bound'> {
  const boundsReached = new Counter({
    name: 'tollgate_bounds_reached_total',
    help: "Connections and calls the server's bounds refused or ended, by bound.",
    labelNames: ['bound'] as const,
    registers: [],
  });
  for (const bound of BOUNDS) boundsReached.labels(bound).inc(0);
  return boundsReached;
}

/** The process itself: the statsd sink's lost flushes, and the gauge that counts workers. */
interface ProcessSeries {
  statsdDropped: Counter;
  workers: Gauge;
}

function createProcessSeries(): ProcessSeries {
  const statsdDropped = new Counter({
    name: 'tollgate_statsd_dropped_flushes_total',
    help: 'statsd flushes (USE_STATSD) that lost stats: no connection, or a server reading nothing.',
    registers: [],
  });
  // Summed over a cluster's live workers (a retired worker's gauges go with it): how many serve.
  const workers = new Gauge({
    name: 'tollgate_workers',
    help: 'Service processes serving: 1 per process; under WORKERS, the workers alive.',
    registers: [],
  });
  workers.set(1);
  return { statsdDropped, workers };
}

/** The reference's local-cache gauges, each read from `read` at every scrape. */
function addLocalCacheGauges(registry: Registry, read: () => LocalCacheStats): void {
  for (const name of LOCAL_CACHE_GAUGES) {
    new Gauge({
      name: `ratelimit_localcache_${name}`,
      help: `The reference's local cache: ${name}, as its cache library counts it.`,
      // A mean access time is averaged over workers; the counts add up.
      aggregator: name === 'averageAccessTime' ? 'average' : 'sum',
      registers: [registry],
      collect() {
        this.set(read()[name]);
      },
    });
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
