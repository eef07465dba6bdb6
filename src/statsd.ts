/**
 * The reference's statsd output (USE_STATSD=true): its stat names, counted in memory and sent
 * every STATS_FLUSH_INTERVAL over TCP (the reference's default) or UDP (statsdTransport.ts).
 *
 * Counters (the value sent is what was added since the last flush; nothing is sent for 0):
 * - `ratelimit.service.rate_limit.DOMAIN.KEY.{total_hits, over_limit, near_limit, within_limit,
 *   shadow_mode, over_limit_with_local_cache}`, KEY being the reference's stats key below the
 *   domain (its parts joined by '.', as in the Prometheus series; see rules/metricKey.ts);
 * - `ratelimit.service.rate_limit.DOMAIN.domain_not_found`, once per descriptor of a check for
 *   a domain without rules, as the reference counts it;
 * - `ratelimit.service.config_load_success`, `ratelimit.service.config_load_error`;
 * - `ratelimit.service.global_shadow_mode`;
 * - `ratelimit.service.call.should_rate_limit.redis_error` (a store failure) and `.service_error`
 *   (a request refused as malformed);
 * - `ratelimit_server.ShouldRateLimit.total_requests`.
 * Timer: `ratelimit_server.ShouldRateLimit.response_time`, in ms, one line per call (at most
 * MAX_TIMINGS a flush), sent with the counters.
 * Gauges, under COMPAT_MODE=reference with the local cache on: `ratelimit.localcache.{hitCount,
 * missCount, lookupCount, entryCount, evacuateCount, expiredCount, overwriteCount,
 * averageAccessTime}`, every flush.
 *
 * EXTRA_TAGS are appended to every name in the reference's form, `NAME.__key=value`, sorted by
 * key, with '.', ':' and '|' of keys and values made '_'.
 *
 * Bounded: descriptor-valued keys (detailed_metric, value_to_metric) take at most
 * METRICS_MAX_DETAILED_SERIES distinct names, as the Prometheus series do; past that their hits
 * are counted under `DOMAIN._overflow`. A statsd server that is down or slow costs nothing but
 * the lost stats: sends never wait, the transport bounds what waits for its socket and drops the
 * rest (each flush that lost a packet is counted), it reconnects by itself, and errors are logged
 * at most once a minute.
 */
import type { CheckEvent, RuleOutcome } from './outcome.js';
import { splitHits } from './outcome.js';
import { statName } from './rules/metricKey.js';
import { LOCAL_CACHE_GAUGES, OVERFLOW_KEY, type Metrics } from './metrics.js';
import type { LocalCacheStats } from './overLimitCache.js';
import { createTcpTransport, createUdpTransport } from './statsdTransport.js';

export interface StatsdSettings {
  host: string;
  port: number;
  protocol: 'tcp' | 'udp';
  flushIntervalMs: number;
  /** EXTRA_TAGS, parsed. */
  extraTags: Readonly<Record<string, string>>;
}

export interface StatsdOptions {
  /** Distinct descriptor-valued stats keys, in total (METRICS_MAX_DETAILED_SERIES). */
  maxDetailedSeries: number;
  /** A send failed: the statsd server is unreachable, say. Called at most once a minute. */
  onError?: (error: Error) => void;
  /** A flush lost some or all of its packets: no connection, or a server that reads nothing. */
  onDroppedFlush?: () => void;
}

export interface Statsd {
  observe(event: CheckEvent): void;
  latency(seconds: number): void;
  invalidRequest(): void;
  configLoad(ok: boolean): void;
  /**
   * The reference's local cache (COMPAT_MODE=reference): its eight gauges go with every flush,
   * as `ratelimit.localcache.NAME`, what they read then.
   */
  localCache(read: () => LocalCacheStats): void;
  /** Sends what is counted now. */
  flush(): void;
  /** A last flush, then the socket closes. */
  close(): Promise<void>;
}

/** Response-time lines kept between two flushes; past it, the rest wait for the next one. */
const MAX_TIMINGS = 10_000;

const RULE_STATS = [
  ['total_hits', 'totalHits'],
  ['over_limit', 'over'],
  ['near_limit', 'near'],
  ['within_limit', 'within'],
  ['shadow_mode', 'shadow'],
  ['over_limit_with_local_cache', 'localCache'],
] as const;

/** One rule key's stat names, built once. */
type RuleNames = Record<(typeof RULE_STATS)[number][1], string>;

export function createStatsd(settings: StatsdSettings, options: StatsdOptions): Statsd {
  const tags = serializeTags(settings.extraTags);
  const name = (stat: string) => `${stat}${tags}`;
  const pending = new Map<string, number>();
  const ruleNames = new Map<string, RuleNames>();
  let detailedNames = 0;
  let lastError = 0;

  const report = (error: Error) => {
    const now = Date.now();
    if (now - lastError < 60_000) return;
    lastError = now;
    options.onError?.(error);
  };
  const transport = (settings.protocol === 'udp' ? createUdpTransport : createTcpTransport)({
    host: settings.host,
    port: settings.port,
    onError: report,
  });
  const packetBytes = settings.protocol === 'udp' ? 1_432 : 8_192;
  /** The response times since the last flush, one line each, as the reference sends them. */
  let timings: string[] = [];
  let readLocalCache: (() => LocalCacheStats) | undefined;
  const localCacheNames = LOCAL_CACHE_GAUGES.map(
    (gauge) => [gauge, name(`ratelimit.localcache.${gauge}`)] as const,
  );

  const add = (stat: string, value: number) => {
    if (value > 0) pending.set(stat, (pending.get(stat) ?? 0) + value);
  };
  const names = {
    configLoadSuccess: name('ratelimit.service.config_load_success'),
    configLoadError: name('ratelimit.service.config_load_error'),
    globalShadowMode: name('ratelimit.service.global_shadow_mode'),
    redisError: name('ratelimit.service.call.should_rate_limit.redis_error'),
    serviceError: name('ratelimit.service.call.should_rate_limit.service_error'),
    totalRequests: name('ratelimit_server.ShouldRateLimit.total_requests'),
    responseTime: name('ratelimit_server.ShouldRateLimit.response_time'),
  };

  function namesOf(rule: RuleOutcome): RuleNames {
    const key = `${statName(rule.domain)}.${rule.metricKey.join('.')}`;
    let known = ruleNames.get(key);
    if (known !== undefined) return known;
    if (rule.detailed) {
      if (detailedNames >= options.maxDetailedSeries) {
        return namesOf({ ...rule, metricKey: [OVERFLOW_KEY], detailed: false });
      }
      detailedNames++;
    }
    const prefix = `ratelimit.service.rate_limit.${key}`;
    known = Object.fromEntries(
      RULE_STATS.map(([stat, field]) => [field, name(`${prefix}.${stat}`)]),
    ) as RuleNames;
    ruleNames.set(key, known);
    return known;
  }

  const notFound = new Map<string, string>();
  function notFoundName(domain: string): string {
    let known = notFound.get(domain);
    if (known !== undefined) return known;
    if (detailedNames >= options.maxDetailedSeries) {
      return name(`ratelimit.service.rate_limit.${OVERFLOW_KEY}.domain_not_found`);
    }
    detailedNames++;
    known = name(`ratelimit.service.rate_limit.${statName(domain)}.domain_not_found`);
    notFound.set(domain, known);
    return known;
  }

  const timer = setInterval(() => statsd.flush(), settings.flushIntervalMs);
  timer.unref();

  const statsd: Statsd = {
    observe(event) {
      try {
        for (const rule of event.rules) {
          if (!(rule.hits >= 0 && rule.hits <= Number.MAX_SAFE_INTEGER)) continue;
          const ruleStats = namesOf(rule);
          const split = splitHits(rule);
          add(ruleStats.totalHits, rule.hits);
          add(ruleStats.over, split.over);
          add(ruleStats.near, split.near);
          add(ruleStats.within, split.within);
          add(ruleStats.shadow, split.shadow);
          add(ruleStats.localCache, split.localCache);
        }
        // Counted per descriptor, as the reference looks each one up. Clients choose domains,
        // so their names share the cap of descriptor-valued keys.
        if (event.unknownDomain)
          add(notFoundName(event.check.domain), event.check.descriptors.length);
        if (event.globalShadow) add(names.globalShadowMode, 1);
        if (event.storeError !== undefined) add(names.redisError, 1);
      } catch {
        // Stats must never fail a check.
      }
    },
    latency(seconds) {
      add(names.totalRequests, 1);
      if (seconds >= 0 && Number.isFinite(seconds) && timings.length < MAX_TIMINGS) {
        timings.push(`${names.responseTime}:${Math.round(seconds * 1_000_000) / 1_000}|ms`);
      }
    },
    invalidRequest() {
      add(names.totalRequests, 1);
      add(names.serviceError, 1);
    },
    configLoad(ok) {
      add(ok ? names.configLoadSuccess : names.configLoadError, 1);
    },
    localCache(read) {
      readLocalCache = read;
    },
    flush() {
      const lines = timings;
      for (const [stat, value] of pending) lines.push(`${stat}:${value}|c`);
      if (readLocalCache !== undefined) {
        const stats = readLocalCache();
        for (const [gauge, stat] of localCacheNames) lines.push(`${stat}:${stats[gauge]}|g`);
      }
      pending.clear();
      timings = [];
      // Stats the socket cannot take now are dropped, as the reference's stats library drops
      // them when its channel is full.
      let dropped = false;
      let packet = '';
      for (const line of lines) {
        if (packet !== '' && packet.length + 1 + line.length > packetBytes) {
          if (!transport.send(packet)) dropped = true;
          packet = line;
        } else {
          packet = packet === '' ? line : `${packet}\n${line}`;
        }
      }
      if (packet !== '' && !transport.send(packet)) dropped = true;
      if (dropped) options.onDroppedFlush?.();
    },
    async close() {
      clearInterval(timer);
      statsd.flush();
      // The transport waits at most half a second: a server that never answered must not hold
      // the shutdown.
      await transport.close();
    },
  };
  return statsd;
}

/** The reference's stats library's tag form: `.__key=value` per tag, sorted by key. */
function serializeTags(tags: Readonly<Record<string, string>>): string {
  const clean = (s: string) => s.replace(/[.:|]/g, '_');
  return Object.keys(tags)
    .filter((key) => key !== '' && tags[key] !== '')
    .sort()
    .map((key) => `.__${clean(key)}=${clean(tags[key] as string)}`)
    .join('');
}

/** Metrics that also count into statsd. */
export function withStatsd(metrics: Metrics, statsd: Statsd | undefined): Metrics {
  if (statsd === undefined) return metrics;
  return {
    ...metrics,
    observe(event) {
      metrics.observe(event);
      statsd.observe(event);
    },
    observeLatency(seconds, outcome) {
      metrics.observeLatency(seconds, outcome);
      statsd.latency(seconds);
    },
    invalidRequest() {
      metrics.invalidRequest();
      statsd.invalidRequest();
    },
    configLoad(ok) {
      metrics.configLoad(ok);
      statsd.configLoad(ok);
    },
    get contentType() {
      return metrics.contentType;
    },
  };
}
