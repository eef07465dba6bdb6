import { describe, expect, it } from 'vitest';
import { StoreError } from '../../src/core/errors.js';
import { createMetrics, type Metrics } from '../../src/observability/metrics.js';
import type { CheckEvent, RuleOutcome } from '../../src/decision/outcome.js';

function rule(metricKey: string[], fields: Partial<RuleOutcome> = {}): RuleOutcome {
  return {
    domain: 'api',
    metricKey,
    detailed: false,
    hits: 1,
    over: false,
    near: false,
    shadowed: false,
    givenBack: false,
    ...fields,
  };
}

function event(fields: Partial<CheckEvent> = {}): CheckEvent {
  return {
    check: { domain: 'api', descriptors: [], hitsAddend: 1 },
    decision: { code: 'OK', statuses: [] },
    storeError: undefined,
    storeMs: 0,
    unknownDomain: false,
    globalShadow: false,
    rules: [],
    ...fields,
  };
}

/** The sample lines of one series, without HELP and TYPE. */
async function samples(metrics: Metrics, name: string): Promise<string[]> {
  const text = await metrics.registry.getSingleMetricAsString(name);
  return text.split('\n').filter((line) => !line.startsWith('#'));
}

describe('metrics for a small scenario', () => {
  const metrics = createMetrics({ maxDetailedSeries: 10, defaultMetrics: false });
  // Two rules within their limits, the deeper one near it.
  metrics.observe(
    event({
      storeMs: 0.4,
      rules: [
        rule(['tenant_acme'], { hits: 2 }),
        rule(['tenant_acme', 'route_/orders'], { hits: 2, near: true }),
      ],
    }),
  );
  // The deeper rule goes over.
  metrics.observe(
    event({
      storeMs: 0.3,
      decision: { code: 'OVER_LIMIT', statuses: [] },
      rules: [rule(['tenant_acme']), rule(['tenant_acme', 'route_/orders'], { over: true })],
    }),
  );
  // A shadow-mode rule over its limit.
  metrics.observe(
    event({
      storeMs: 0.2,
      rules: [rule(['client_beta'], { hits: 3, over: true, shadowed: true })],
    }),
  );
  // Three levels.
  metrics.observe(
    event({ storeMs: 0.2, rules: [rule(['tenant_acme', 'route_/orders', 'method_GET'])] }),
  );
  // The store fails.
  metrics.observe(
    event({
      decision: undefined,
      storeError: new StoreError('redis: timed out', 'timeout'),
      storeMs: 15,
    }),
  );
  // A domain without rules.
  metrics.observe(
    event({ check: { domain: 'nope', descriptors: [], hitsAddend: 1 }, unknownDomain: true }),
  );
  // Global shadow mode lets a denial through.
  metrics.observe(
    event({
      storeMs: 0.2,
      globalShadow: true,
      rules: [rule(['tenant_acme'], { over: true, shadowed: true })],
    }),
  );
  metrics.configLoad(true);
  metrics.configLoad(true);
  metrics.configLoad(false);
  metrics.observeLatency(0.0003, 'ok');
  metrics.observeLatency(0.002, 'over_limit');
  metrics.observeLatency(0.02, 'unavailable');

  it('counts hits per rule, with key1 and key2 from the rule path', async () => {
    expect(
      await metrics.registry.getSingleMetricAsString('ratelimit_service_rate_limit_total_hits'),
    ).toBe(`# HELP ratelimit_service_rate_limit_total_hits Hits on a rule, by the descriptor cost.
# TYPE ratelimit_service_rate_limit_total_hits counter
ratelimit_service_rate_limit_total_hits{domain="api",key1="tenant_acme",key2=""} 4
ratelimit_service_rate_limit_total_hits{domain="api",key1="tenant_acme",key2="route_/orders"} 3
ratelimit_service_rate_limit_total_hits{domain="api",key1="client_beta",key2=""} 3
ratelimit_service_rate_limit_total_hits{domain="api",key1="tenant_acme",key2="route_/orders.method_GET"} 1`);
    expect(await samples(metrics, 'ratelimit_service_rate_limit_over_limit')).toEqual([
      'ratelimit_service_rate_limit_over_limit{domain="api",key1="tenant_acme",key2=""} 1',
      'ratelimit_service_rate_limit_over_limit{domain="api",key1="tenant_acme",key2="route_/orders"} 1',
      'ratelimit_service_rate_limit_over_limit{domain="api",key1="client_beta",key2=""} 3',
    ]);
    expect(await samples(metrics, 'ratelimit_service_rate_limit_within_limit')).toEqual([
      'ratelimit_service_rate_limit_within_limit{domain="api",key1="tenant_acme",key2=""} 3',
      'ratelimit_service_rate_limit_within_limit{domain="api",key1="tenant_acme",key2="route_/orders"} 2',
      'ratelimit_service_rate_limit_within_limit{domain="api",key1="tenant_acme",key2="route_/orders.method_GET"} 1',
    ]);
    expect(await samples(metrics, 'ratelimit_service_rate_limit_near_limit')).toEqual([
      'ratelimit_service_rate_limit_near_limit{domain="api",key1="tenant_acme",key2="route_/orders"} 2',
    ]);
    expect(await samples(metrics, 'ratelimit_service_rate_limit_shadow_mode')).toEqual([
      'ratelimit_service_rate_limit_shadow_mode{domain="api",key1="tenant_acme",key2=""} 1',
      'ratelimit_service_rate_limit_shadow_mode{domain="api",key1="client_beta",key2=""} 3',
    ]);
  });

  it('counts store errors, unknown domains, global shadow mode and config loads', async () => {
    expect(await samples(metrics, 'ratelimit_service_should_rate_limit_error')).toEqual([
      'ratelimit_service_should_rate_limit_error{err_type="timeout"} 1',
    ]);
    // tollgate's own series start at 0 for every kind; the reference's appear at their first.
    expect(await samples(metrics, 'tollgate_store_errors_total')).toEqual([
      'tollgate_store_errors_total{kind="timeout"} 1',
      'tollgate_store_errors_total{kind="connection"} 0',
      'tollgate_store_errors_total{kind="out_of_memory"} 0',
      'tollgate_store_errors_total{kind="wrong_type"} 0',
      'tollgate_store_errors_total{kind="permission"} 0',
      'tollgate_store_errors_total{kind="auth"} 0',
      'tollgate_store_errors_total{kind="unavailable"} 0',
      'tollgate_store_errors_total{kind="script"} 0',
    ]);
    expect(await samples(metrics, 'tollgate_domain_not_found_total')).toEqual([
      'tollgate_domain_not_found_total 1',
    ]);
    expect(await samples(metrics, 'ratelimit_service_global_shadow_mode')).toEqual([
      'ratelimit_service_global_shadow_mode 1',
    ]);
    expect(await samples(metrics, 'ratelimit_service_config_load_success')).toEqual([
      'ratelimit_service_config_load_success 2',
    ]);
    expect(await samples(metrics, 'ratelimit_service_config_load_error')).toEqual([
      'ratelimit_service_config_load_error 1',
    ]);
    expect(await samples(metrics, 'tollgate_config_loads_total')).toEqual([
      'tollgate_config_loads_total{result="success"} 2',
      'tollgate_config_loads_total{result="error"} 1',
    ]);
    expect(await samples(metrics, 'tollgate_metrics_detailed_overflow_total')).toEqual([
      'tollgate_metrics_detailed_overflow_total 0',
    ]);
  });

  it('times the store only for checks that called it', async () => {
    const lines = await samples(metrics, 'tollgate_store_duration_seconds');
    expect(lines).toContain('tollgate_store_duration_seconds_bucket{le="0.0001"} 0');
    expect(lines).toContain('tollgate_store_duration_seconds_bucket{le="0.0005"} 5');
    expect(lines).toContain('tollgate_store_duration_seconds_bucket{le="0.01"} 5');
    expect(lines).toContain('tollgate_store_duration_seconds_bucket{le="0.025"} 6');
    expect(lines).toContain('tollgate_store_duration_seconds_count 6');
  });

  it('records RPC latency under the reference name and by outcome', async () => {
    expect(await samples(metrics, 'ratelimit_service_total_requests')).toEqual([
      'ratelimit_service_total_requests{grpc_method="ShouldRateLimit"} 3',
    ]);
    const responseTime = await samples(metrics, 'ratelimit_service_response_time_seconds');
    expect(responseTime).toContain(
      'ratelimit_service_response_time_seconds_bucket{le="0.001",grpc_method="ShouldRateLimit"} 1',
    );
    expect(responseTime).toContain(
      'ratelimit_service_response_time_seconds_count{grpc_method="ShouldRateLimit"} 3',
    );
    const bounds = ['0.0001', '0.00025', '0.0005', '0.001', '0.0025', '0.005', '0.01', '0.025'];
    bounds.push('0.05', '0.1', '0.25', '0.5', '1', '+Inf');
    /** Bucket lines for one observation that falls in bucket `first` (0-based). */
    const buckets = (outcome: string, first: number) =>
      bounds.map(
        (le, i) =>
          `tollgate_check_duration_seconds_bucket{le="${le}",outcome="${outcome}"} ${i < first ? 0 : 1}`,
      );
    expect(await samples(metrics, 'tollgate_check_duration_seconds')).toEqual([
      ...buckets('ok', 2),
      'tollgate_check_duration_seconds_sum{outcome="ok"} 0.0003',
      'tollgate_check_duration_seconds_count{outcome="ok"} 1',
      ...buckets('over_limit', 4),
      'tollgate_check_duration_seconds_sum{outcome="over_limit"} 0.002',
      'tollgate_check_duration_seconds_count{outcome="over_limit"} 1',
      ...buckets('unavailable', 7),
      'tollgate_check_duration_seconds_sum{outcome="unavailable"} 0.02',
      'tollgate_check_duration_seconds_count{outcome="unavailable"} 1',
    ]);
  });
});

describe('detailed series', () => {
  const address = (ip: string, fields: Partial<RuleOutcome> = {}) =>
    rule([`remote_address_${ip}`], { detailed: true, ...fields });

  it('keeps at most maxDetailedSeries, then reports the rest per domain under _overflow', async () => {
    const metrics = createMetrics({ maxDetailedSeries: 2, defaultMetrics: false });
    metrics.observe(event({ rules: [address('10.0.0.1'), address('10.0.0.2')] }));
    metrics.observe(event({ rules: [address('10.0.0.3'), address('10.0.0.1')] }));
    metrics.observe(event({ rules: [address('10.0.0.4', { over: true })] }));
    metrics.observe(event({ rules: [rule(['user_x'], { domain: 'web', detailed: true })] }));
    // Keys from the rules file are bounded by it, so they are never capped.
    metrics.observe(event({ rules: [rule(['tenant'])] }));

    expect(await samples(metrics, 'ratelimit_service_rate_limit_total_hits')).toEqual([
      'ratelimit_service_rate_limit_total_hits{domain="api",key1="remote_address_10.0.0.1",key2=""} 2',
      'ratelimit_service_rate_limit_total_hits{domain="api",key1="remote_address_10.0.0.2",key2=""} 1',
      'ratelimit_service_rate_limit_total_hits{domain="api",key1="_overflow",key2=""} 2',
      'ratelimit_service_rate_limit_total_hits{domain="web",key1="_overflow",key2=""} 1',
      'ratelimit_service_rate_limit_total_hits{domain="api",key1="tenant",key2=""} 1',
    ]);
    expect(await samples(metrics, 'ratelimit_service_rate_limit_over_limit')).toEqual([
      'ratelimit_service_rate_limit_over_limit{domain="api",key1="_overflow",key2=""} 1',
    ]);
    expect(await samples(metrics, 'tollgate_metrics_detailed_overflow_total')).toEqual([
      'tollgate_metrics_detailed_overflow_total 3',
    ]);
  });

  it('sends every detailed outcome to _overflow when the cap is 0', async () => {
    const metrics = createMetrics({ maxDetailedSeries: 0, defaultMetrics: false });
    metrics.observe(event({ rules: [address('10.0.0.1', { hits: 5 })] }));
    expect(await samples(metrics, 'ratelimit_service_rate_limit_total_hits')).toEqual([
      'ratelimit_service_rate_limit_total_hits{domain="api",key1="_overflow",key2=""} 5',
    ]);
  });

  it('bounds the series however many values arrive', async () => {
    const metrics = createMetrics({ maxDetailedSeries: 50, defaultMetrics: false });
    for (let i = 0; i < 10_000; i++) metrics.observe(event({ rules: [address(`10.0.${i}`)] }));
    expect(await samples(metrics, 'ratelimit_service_rate_limit_total_hits')).toHaveLength(51);
    expect(await samples(metrics, 'tollgate_metrics_detailed_overflow_total')).toEqual([
      'tollgate_metrics_detailed_overflow_total 9950',
    ]);
  });
});

describe('the text exposition', () => {
  // `name{label="value",...} value`. prom-client writes NaN as `Nan` (the event-loop lag before its
  // first sample); Prometheus reads values with Go's ParseFloat, which takes NaN and Inf in any case.
  const SAMPLE =
    /^[a-zA-Z_:][a-zA-Z0-9_:]*(\{([a-zA-Z_][a-zA-Z0-9_]*="([^"\\\n]|\\["\\n])*",?)*\})? (-?[0-9.e+-]+|[nN][aA][nN]|[+-]Inf)$/;

  it('parses as Prometheus text, process metrics included, whatever the label values', async () => {
    const metrics = createMetrics({ maxDetailedSeries: 10 });
    metrics.observe(
      event({ rules: [rule(['path_"quoted"\\back\nline', 'b_1'], { detailed: true })] }),
    );
    metrics.observeLatency(0.001, 'ok');
    metrics.configLoad(true);

    const text = await metrics.text();
    const lines = text.split('\n').filter((line) => line !== '' && !line.startsWith('#'));
    expect(lines.filter((line) => !SAMPLE.test(line))).toEqual([]);
    expect(text).toContain(
      String.raw`ratelimit_service_rate_limit_total_hits{domain="api",key1="path_\"quoted\"\\back\nline",key2="b_1"} 1`,
    );
    expect(text).toMatch(/^tollgate_process_cpu_user_seconds_total \d/m);
    expect(text).toMatch(/^tollgate_nodejs_heap_size_used_bytes \d/m);
    expect(metrics.contentType).toBe('text/plain; version=0.0.4; charset=utf-8');
  });

  it('keeps each registry private, so two instances do not clash', async () => {
    const first = createMetrics({ maxDetailedSeries: 1 });
    const second = createMetrics({ maxDetailedSeries: 1 });
    first.configLoad(true);
    expect(await samples(first, 'ratelimit_service_config_load_success')).toEqual([
      'ratelimit_service_config_load_success 1',
    ]);
    expect(await samples(second, 'ratelimit_service_config_load_success')).toEqual([
      'ratelimit_service_config_load_success 0',
    ]);
  });
});

describe('observe', () => {
  it('never throws, and skips hits that are not a count', async () => {
    const metrics = createMetrics({ maxDetailedSeries: 1, defaultMetrics: false });
    const malformed = { ...event(), rules: undefined } as unknown as CheckEvent;
    expect(() => metrics.observe(malformed)).not.toThrow();
    metrics.observe(
      event({ rules: [rule(['a'], { hits: Number.NaN }), rule(['b'], { hits: -1 })] }),
    );
    metrics.observeLatency(Number.NaN, 'internal');
    expect(await samples(metrics, 'ratelimit_service_rate_limit_total_hits')).toEqual([]);
    expect(await samples(metrics, 'tollgate_check_duration_seconds')).toEqual([]);
    expect(await samples(metrics, 'ratelimit_service_total_requests')).toEqual([
      'ratelimit_service_total_requests{grpc_method="ShouldRateLimit"} 1',
    ]);
  });
});
