import { describe, expect, it } from 'vitest';
import {
  everyQuery,
  metricNames,
  missingLabels,
  missingNames,
  withVariablesFilled,
} from '../support/observability.js';

// The extractor behind test/integration/observabilityMetrics.test.ts, which finds every metric
// name of the dashboard and the alerts in tollgate's real /metrics.

const EXPOSITION = `# HELP tollgate_store_errors_total Store failures, by kind.
# TYPE tollgate_store_errors_total counter
tollgate_store_errors_total{kind="timeout"} 3
# HELP ratelimit_service_response_time_seconds RPC latency in seconds.
# TYPE ratelimit_service_response_time_seconds histogram
ratelimit_service_response_time_seconds_bucket{le="0.001",grpc_method="ShouldRateLimit"} 1
`;

describe('metricNames', () => {
  it('finds the series of a histogram quantile, not its functions, labels or variables', () => {
    const expr =
      'histogram_quantile(0.99, sum by (job, le) ' +
      '(rate(ratelimit_service_response_time_seconds_bucket{job=~"$job", le!="+Inf"}[$__rate_interval])))';
    expect(metricNames(expr)).toEqual(['ratelimit_service_response_time_seconds_bucket']);
  });

  it('finds both sides of a vector match, past ignoring, group_left, offset and numbers', () => {
    const expr = `sum by (job, kind) (rate(tollgate_store_errors_total[5m]))
      / ignoring (kind) group_left
      sum by (job) (rate(ratelimit_service_total_requests[5m] offset 1h)) > 1e-2`;
    expect(metricNames(expr)).toEqual([
      'ratelimit_service_total_requests',
      'tollgate_store_errors_total',
    ]);
  });

  it('reads names out of label values that look like PromQL', () => {
    const expr = 'topk(10, up{instance="sum(fake_metric)", job=~"a|b"}) and on (job) other_series';
    expect(metricNames(expr)).toEqual(['other_series', 'up']);
  });

  it('finds a metric name in every query of the dashboard and the alerts', () => {
    for (const { where, expr } of everyQuery()) {
      expect(metricNames(expr), where).not.toEqual([]);
    }
  });
});

describe('missingNames', () => {
  it("accepts declared names and a histogram's series, and reports anything else", () => {
    const names = [
      'tollgate_store_errors_total',
      'ratelimit_service_response_time_seconds_bucket',
      'ratelimit_service_response_time_seconds_count',
      'up',
      'tollgate_made_up_total',
      'tollgate_store_errors_total_bucket',
      'ratelimit_service_response_time_seconds_total',
    ];
    expect(missingNames(names, EXPOSITION)).toEqual([
      'tollgate_made_up_total',
      'tollgate_store_errors_total_bucket',
      'ratelimit_service_response_time_seconds_total',
    ]);
  });
});

describe('withVariablesFilled', () => {
  it("gives Grafana's ranges a duration and every other variable a match-all", () => {
    expect(
      withVariablesFilled('rate(x{job=~"$job", instance=~"${instance}"}[$__rate_interval])'),
    ).toBe('rate(x{job=~".*", instance=~".*"}[5m])');
  });
});

describe('missingLabels', () => {
  it('reports labels and exact values that no sample of the metric has', () => {
    const expr =
      'sum by (job, kind, reason) (rate(tollgate_store_errors_total{instance=~"$instance", kind="timeout"}[5m]))' +
      ' / sum(rate(tollgate_store_errors_total{kind="oom"}[5m]))';
    expect(missingLabels(expr, EXPOSITION)).toEqual([
      { label: 'reason' },
      { label: 'kind', value: 'oom' },
    ]);
  });

  it("finds a histogram's le and labels on its buckets", () => {
    const expr =
      'histogram_quantile(0.5, sum by (le, grpc_method) (rate(ratelimit_service_response_time_seconds_bucket[5m])))';
    expect(missingLabels(expr, EXPOSITION)).toEqual([]);
  });
});
