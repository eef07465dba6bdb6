/**
 * The reference's statsd output (USE_STATSD=true): its stat names, counted in memory and sent
 * every STATS_FLUSH_INTERVAL over TCP (the reference's default) or UDP (statsdTransport.ts).
 *
 * Counters (the value sent is what was added since the last flush; nothing is sent for 0):
 * - `ratelimit.service.rate_limit.DOMAIN.KEY.{total_hits, total_negative_hits, over_limit,
 *   near_limit, within_limit, shadow_mode, over_limit_with_local_cache}`, KEY being the reference's stats key below the
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
 * at most once a minute. STATSD_HOST is looked up once, not per packet (statsdAddress.ts).
 */
import type { CheckEvent, RuleOutcome } from '../decision/outcome.js';
import { splitHits } from '../decision/outcome.js';
import { statName } from '../rules/metricKey.js';
import { LOCAL_CACHE_GAUGES, OVERFLOW_KEY, type Metrics } from './metrics.js';
import type { LocalCacheStats } from '../store/overLimitCache.js';
import type { Lookup } from './statsdAddress.js';
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
  /**
   * A flush lost some or all of its packets: no connection, a server that reads nothing, a name
   * that does not resolve, a send that failed. Called at most once a flush.
   */
  onDroppedFlush?: () => void;
  /** How STATSD_HOST is looked up; node:dns's `lookup` by default. */
  lookup?: Lookup;
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
  ['total_negative_hits', 'negativeHits'],
  ['over_limit', 'over'],
  ['near_limit', 'near'],
  ['within_limit', 'within'],
  ['shadow_mode', 'shadow'],
  ['over_limit_with_local_cache', 'localCache'],
] as const;

/** One rule key's stat names, built once. */
type RuleNames = Record<(typeof RULE_STATS)[number][1], string>;

/** Every stat name tollgate sends, with EXTRA_TAGS, each built once. */
interface StatNames {
  /** A rule's six names; past the cap of descriptor-valued keys, its domain's overflow names. */
  rule(rule: RuleOutcome): RuleNames;
  /** `domain_not_found` of a domain, under the same cap, since clients choose domains. */
  notFound(domain: string): string;
  readonly service: Readonly<Record<keyof typeof SERVICE_STATS, string>>;
  readonly localCache: readonly (readonly [(typeof LOCAL_CACHE_GAUGES)[number], string])[];
}

const SERVICE_STATS = {
  configLoadSuccess: 'ratelimit.service.config_load_success',
  configLoadError: 'ratelimit.service.config_load_error',
  globalShadowMode: 'ratelimit.service.global_shadow_mode',
  redisError: 'ratelimit.service.call.should_rate_limit.redis_error',
  serviceError: 'ratelimit.service.call.should_rate_limit.service_error',
  totalRequests: 'ratelimit_server.ShouldRateLimit.total_requests',
  responseTime: 'ratelimit_server.ShouldRateLimit.response_time',
} as const;

function createStatNames(
  extraTags: Readonly<Record<string, string>>,
  maxDetailedSeries: number,
): StatNames {
  const tags = serializeTags(extraTags);
  const name = (stat: string) => `${stat}${tags}`;
  const ruleNames = new Map<string, RuleNames>();
  const notFound = new Map<string, string>();
  let detailedNames = 0;

  function rule(outcome: RuleOutcome): RuleNames {
    const key = `${statName(outcome.domain)}.${outcome.metricKey.join('.')}`;
    let known = ruleNames.get(key);
    if (known !== undefined) return known;
    if (outcome.detailed) {
      if (detailedNames >= maxDetailedSeries) {
        return rule({ ...outcome, metricKey: [OVERFLOW_KEY], detailed: false });
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

  return {
    rule,
    notFound(domain) {
      let known = notFound.get(domain);
      if (known !== undefined) return known;
      if (detailedNames >= maxDetailedSeries) {
        return name(`ratelimit.service.rate_limit.${OVERFLOW_KEY}.domain_not_found`);
      }
      detailedNames++;
      known = name(`ratelimit.service.rate_limit.${statName(domain)}.domain_not_found`);
      notFound.set(domain, known);
      return known;
    },
    service: Object.fromEntries(
      Object.entries(SERVICE_STATS).map(([field, stat]) => [field, name(stat)]),
    ) as StatNames['service'],
    localCache: LOCAL_CACHE_GAUGES.map(
      (gauge) => [gauge, name(`ratelimit.localcache.${gauge}`)] as const,
    ),
  };
}

/** Lines joined by newlines into packets of at most `packetBytes`, a longer line alone. */
function packets(lines: readonly string[], packetBytes: number): string[] {
  const out: string[] = [];
  let packet = '';
  for (const line of lines) {
    if (packet !== '' && packet.length + 1 + line.length > packetBytes) {
      out.push(packet);
      packet = line;
    } else {
      packet = packet === '' ? line : `${packet}\n${line}`;
    }
  }
  if (packet !== '') out.push(packet);
  return out;
}

/**
 * The socket, with its errors reported at most once a minute, and its lost packets counted as
 * dropped flushes, once a flush.
 */
function openTransport(settings: StatsdSettings, options: StatsdOptions) {
  let lastError = 0;
  const report = (error: Error) => {
    const now = Date.now();
    if (now - lastError < 60_000) return;
    lastError = now;
    options.onError?.(error);
  };
  let flushes = 0;
  /** The last flush counted as dropped. */
  let droppedFlush = -1;
  const dropped = () => {
    if (droppedFlush === flushes) return;
    droppedFlush = flushes;
    options.onDroppedFlush?.();
  };
  const transport = (settings.protocol === 'udp' ? createUdpTransport : createTcpTransport)({
    host: settings.host,
    port: settings.port,
    onError: report,
    // A UDP send fails after its flush returned; it counts against the latest flush.
    onLost: dropped,
    lookup: options.lookup,
  });
  const flushing = () => {
    flushes += 1;
  };
  return { transport, flushing, dropped };
}

export function createStatsd(settings: StatsdSettings, options: StatsdOptions): Statsd {
  const names = createStatNames(settings.extraTags, options.maxDetailedSeries);
  const pending = new Map<string, number>();
  const { transport, flushing, dropped } = openTransport(settings, options);
  const packetBytes = settings.protocol === 'udp' ? 1_432 : 8_192;
  /** The response times since the last flush, one line each, as the reference sends them. */
  let timings: string[] = [];
  let readLocalCache: (() => LocalCacheStats) | undefined;
  const add = (stat: string, value: number) => {
    if (value > 0) pending.set(stat, (pending.get(stat) ?? 0) + value);
  };
  const { service } = names;

  const timer = setInterval(() => statsd.flush(), settings.flushIntervalMs);
  timer.unref();

  const statsd: Statsd = {
    observe(event) {
      try {
        for (const rule of event.rules) {
          if (!(rule.hits >= 0 && rule.hits <= Number.MAX_SAFE_INTEGER)) continue;
          const ruleStats = names.rule(rule);
          if (rule.givenBack) {
            add(ruleStats.negativeHits, rule.hits);
            continue;
          }
          const split = splitHits(rule);
          add(ruleStats.totalHits, rule.hits);
          add(ruleStats.over, split.over);
          add(ruleStats.near, split.near);
          add(ruleStats.within, split.within);
          add(ruleStats.shadow, split.shadow);
          add(ruleStats.localCache, split.localCache);
        }
        // Counted per descriptor, as the reference looks each one up.
        if (event.unknownDomain)
          add(names.notFound(event.check.domain), event.check.descriptors.length);
        if (event.globalShadow) add(service.globalShadowMode, 1);
        if (event.storeError !== undefined) add(service.redisError, 1);
      } catch {
        // Stats must never fail a check.
      }
    },
    latency(seconds) {
      add(service.totalRequests, 1);
      if (seconds >= 0 && Number.isFinite(seconds) && timings.length < MAX_TIMINGS) {
        timings.push(`${service.responseTime}:${Math.round(seconds * 1_000_000) / 1_000}|ms`);
      }
    },
    invalidRequest() {
      add(service.totalRequests, 1);
      add(service.serviceError, 1);
    },
    configLoad(ok) {
      add(ok ? service.configLoadSuccess : service.configLoadError, 1);
    },
    localCache(read) {
      readLocalCache = read;
    },
    flush() {
      const lines = timings;
      for (const [stat, value] of pending) lines.push(`${stat}:${value}|c`);
      if (readLocalCache !== undefined) {
        const stats = readLocalCache();
        for (const [gauge, stat] of names.localCache) lines.push(`${stat}:${stats[gauge]}|g`);
      }
      pending.clear();
      timings = [];
      flushing();
      // Stats the socket cannot take now are dropped, as the reference's stats library drops
      // them when its channel is full.
      for (const packet of packets(lines, packetBytes)) {
        if (!transport.send(packet)) dropped();
      }
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
