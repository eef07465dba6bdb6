/**
 * The series of metrics.ts, grouped by concern: rule outcomes, checks, requests, the store, rules
 * loads, the servers' bounds, the process. Each group's function makes its series (names, help
 * texts, labels and buckets, which dashboards and alerts depend on) and the counts the hot path
 * adds to, which a series' `collect` moves into prom-client when the registry is read.
 * `registerSeries` sets the exposition's order. With metrics.ts, the only module that imports
 * prom-client.
 */

import { Counter, Gauge, Histogram, type Metric, type Registry } from 'prom-client';
import type { LocalCacheStats } from '../store/overLimitCache.js';
import { STORE_ERROR_KINDS } from '../store/redisErrors.js';

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
  'grpc_peer_resets',
  'grpc_health_watches',
  'http_connections',
  'http_rlconfig',
  'rlqs_streams',
  'rlqs_buckets',
  'rlqs_reports',
  'rlqs_stale',
  'rlqs_queued_bytes',
  'rlqs_queued_bytes_total',
  'rlqs_unread',
] as const;
export type Bound = (typeof BOUNDS)[number];

/** From a sub-millisecond answer to a slow one; includes every default bucket up to 1 s. */
/**
 * The latency histograms' bounds, in seconds. An alert's threshold on a quantile of them sits on a
 * bound (TollgateLatencyHigh's 10 ms): there, "p99 above it" means exactly "more than 1% of calls
 * took longer", where between two bounds it would read a straight line drawn across the bucket.
 */
export const LATENCY_BUCKETS = [
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
export interface RuleSeries {
  labels: RuleLabels;
  totalHits: number;
  /** is_negative_hits: what was given back. */
  negativeHits: number;
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

export function record(pending: PendingHistogram, seconds: number): void {
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

/** Every series of a registry, by concern. */
export interface Series {
  rules: RuleCounters;
  checks: CheckCounters;
  requests: RequestSeries;
  store: StoreSeries;
  loads: RulesLoadSeries;
  boundsReached: Counter<'bound'>;
  process: ProcessSeries;
  rlqs: RlqsSeries;
}

/**
 * Registers every series, in the exposition's order, which interleaves the concerns. Each series
 * is made with `registers: []` (prom-client's default is its global registry), so this list alone
 * decides what /metrics shows and in which order: a series left out of it is not exposed.
 */
export function registerSeries(registry: Registry, s: Series): void {
  const inOrder: Metric[] = [
    s.rules.totalHits,
    s.rules.negativeHits,
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
    s.rlqs.streams,
    s.rlqs.buckets,
    s.rlqs.reports,
    s.rlqs.requests,
    s.rlqs.assignments,
    s.rlqs.overAdmitted,
  ];
  for (const metric of inOrder) registry.registerMetric(metric);
}

type RuleCounter = Counter<(typeof RULE_LABELS)[number]>;

/**
 * The per-rule counters and the counts not yet moved into them: each rule's RuleSeries is in
 * `series` and, by its labels, in `byLabels`. `detailed` counts the label sets that
 * descriptor-valued keys have taken of the cap.
 */
export interface RuleCounters {
  totalHits: RuleCounter;
  negativeHits: RuleCounter;
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

export function createRuleCounters(maxDetailed: number, referenceLabels: boolean): RuleCounters {
  const collect = (): void => flushRules(rules);
  const counter = (name: string, help: string): RuleCounter =>
    new Counter({ name, help, labelNames: RULE_LABELS, registers: [], collect });
  const rules: RuleCounters = {
    totalHits: counter(
      'ratelimit_service_rate_limit_total_hits',
      'Hits on a rule, by the descriptor cost.',
    ),
    negativeHits: counter(
      'ratelimit_service_rate_limit_total_negative_hits',
      'Hits given back to a rule (is_negative_hits), by the descriptor cost.',
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
    maxDetailed,
    referenceLabels,
  };
  return rules;
}

/** Moves the per-rule counts into the counters; any of them calls it when the registry is read. */
function flushRules(rules: RuleCounters): void {
  for (const s of rules.series) {
    if (s.totalHits > 0) rules.totalHits.inc(s.labels, s.totalHits);
    if (s.negativeHits > 0) rules.negativeHits.inc(s.labels, s.negativeHits);
    if (s.overLimit > 0) rules.overLimit.inc(s.labels, s.overLimit);
    if (s.nearLimit > 0) rules.nearLimit.inc(s.labels, s.nearLimit);
    if (s.withinLimit > 0) rules.withinLimit.inc(s.labels, s.withinLimit);
    if (s.shadowMode > 0) rules.shadowMode.inc(s.labels, s.shadowMode);
    if (s.localCache > 0) rules.localCache.inc(s.labels, s.localCache);
    s.totalHits = s.negativeHits = 0;
    s.overLimit = s.nearLimit = s.withinLimit = s.shadowMode = s.localCache = 0;
  }
}

/** How checks were answered besides their rules' outcomes. */
export interface CheckCounters {
  globalShadowMode: Counter;
  domainNotFound: Counter;
  overLimitCacheHits: Counter;
}

export function createCheckCounters(): CheckCounters {
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

/** RPCs answered and their latencies, and requests refused as malformed. */
export interface RequestSeries {
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

export function createRequestSeries(): RequestSeries {
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

/** Store failures, under the reference's name and tollgate's, and the time spent in the store. */
export interface StoreSeries {
  shouldRateLimitError: Counter<'err_type'>;
  storeErrors: Counter<'kind'>;
  storeDuration: Histogram;
  /** Both error series' children for each kind seen so far. */
  errorChildren: Map<string, Counter.Internal[]>;
  /** Time in the store since the registry was last read, moved in by `collect`. */
  pendingDurations: PendingHistogram;
}

export function createStoreSeries(): StoreSeries {
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

/** Rules loads, under the reference's names and tollgate's, and the rules in force (xDS). */
export interface RulesLoadSeries {
  configLoadSuccess: Counter;
  configLoadError: Counter;
  configLoads: Counter<'result'>;
  loadSuccess: Counter.Internal;
  loadError: Counter.Internal;
  rulesInfo: Gauge<'source' | 'version'>;
}

export function createRulesLoadSeries(): RulesLoadSeries {
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

/** What the gRPC and HTTP servers' bounds refused or ended; every bound starts at 0. */
export function createBoundsReached(): Counter<'bound'> {
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

export function createProcessSeries(): ProcessSeries {
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
export function addLocalCacheGauges(registry: Registry, read: () => LocalCacheStats): void {
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

/** What an RLQS stream's bucket may be told, as `tollgate_rlqs_assignments_total` labels it. */
export const RLQS_ACTIONS = ['token_bucket', 'allow_all', 'deny_all', 'abandon'] as const;
export type RlqsActionLabel = (typeof RLQS_ACTIONS)[number];

/** Envoy's quota service: its streams and buckets (read at each scrape), reports and actions. */
export interface RlqsSeries {
  streams: Gauge;
  buckets: Gauge;
  reports: Counter;
  requests: Counter<'result'>;
  assignments: Counter<'action'>;
  overAdmitted: Counter;
  /** Where the gauges read from; unset until the service serves RLQS. */
  read: { streams(): number; buckets(): number } | undefined;
}

export function createRlqsSeries(): RlqsSeries {
  const series: RlqsSeries = {
    streams: new Gauge({
      name: 'tollgate_rlqs_streams',
      help: 'RLQS streams (StreamRateLimitQuotas) open.',
      registers: [],
      collect() {
        this.set(series.read?.streams() ?? 0);
      },
    }),
    buckets: new Gauge({
      name: 'tollgate_rlqs_buckets',
      help: 'Buckets held by the open RLQS streams.',
      registers: [],
      collect() {
        this.set(series.read?.buckets() ?? 0);
      },
    }),
    reports: new Counter({
      name: 'tollgate_rlqs_reports_total',
      help: 'RLQS usage reports answered.',
      registers: [],
    }),
    requests: new Counter({
      name: 'tollgate_rlqs_requests_reported_total',
      help: 'Requests that RLQS clients reported, by result; the allowed ones are charged to the counters.',
      labelNames: ['result'] as const,
      registers: [],
    }),
    assignments: new Counter({
      name: 'tollgate_rlqs_assignments_total',
      help: 'Bucket actions sent to RLQS clients, by action.',
      labelNames: ['action'] as const,
      registers: [],
    }),
    overAdmitted: new Counter({
      name: 'tollgate_rlqs_over_admitted_total',
      help: "Requests RLQS clients reported allowed that landed past their rule's limit, as the store counted them when charged.",
      registers: [],
    }),
    read: undefined,
  };
  for (const result of ['allowed', 'denied']) series.requests.labels(result).inc(0);
  for (const action of RLQS_ACTIONS) series.assignments.labels(action).inc(0);
  return series;
}
