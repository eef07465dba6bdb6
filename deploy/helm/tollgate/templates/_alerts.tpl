{{/*
The alerting rules of deploy/prometheus/tollgate-alerts.yaml, as the PrometheusRule's (the
tests hold the two to the same alerts). @JOB@ stands for the release's job, @RUNBOOK@ for
prometheusRule.runbookBaseUrl; the rest is Prometheus's own templating, kept out of Helm's.
*/}}
{{- define "tollgate.alertRules" -}}
{{`- alert: TollgateDown
  expr: up{job="@JOB@"} == 0
  for: 2m
  labels:
    severity: critical
  annotations:
    runbook_url: @RUNBOOK@#tollgatedown
    summary: 'tollgate {{ $labels.instance }} is down'
    description: >-
      Prometheus could not scrape {{ $labels.instance }} for 2 minutes. Envoy's calls to it
      fail, and its failure_mode_deny decides them.
- alert: TollgateAbsent
  expr: absent(up{job="@JOB@"})
  for: 10m
  labels:
    severity: critical
  annotations:
    runbook_url: @RUNBOOK@#tollgateabsent
    summary: 'No tollgate target is scraped'
    description: >-
      Prometheus has had no tollgate target for 10 minutes: the service is gone, or service
      discovery or the scrape configuration lost it.
- alert: TollgateStoreErrors
  expr: |
    sum by (job, instance, kind) (rate(tollgate_store_errors_total{job="@JOB@"}[5m]))
      / ignoring (kind) group_left
    sum by (job, instance) (rate(ratelimit_service_total_requests{job="@JOB@"}[5m]))
    > 0.01
  for: 5m
  labels:
    severity: critical
  annotations:
    runbook_url: @RUNBOOK@#tollgatestoreerrors
    summary: 'tollgate {{ $labels.instance }}: Redis calls fail ({{ $labels.kind }})'
    description: >-
      {{ $value | humanizePercentage }} of the checks on {{ $labels.instance }} failed their
      store call with kind {{ $labels.kind }} over 5 minutes. They are answered by
      FAILURE_MODE, not by the limits.
- alert: TollgateLatencyHigh
  expr: |
    histogram_quantile(0.99,
      sum by (job, instance, le) (rate(ratelimit_service_response_time_seconds_bucket{job="@JOB@"}[5m]))
    ) > 0.01
  for: 10m
  labels:
    severity: warning
  annotations:
    runbook_url: @RUNBOOK@#tollgatelatencyhigh
    summary: 'tollgate {{ $labels.instance }}: p99 latency above 10 ms'
    description: >-
      The 99th percentile of ShouldRateLimit on {{ $labels.instance }} has been
      {{ $value | humanizeDuration }} for 10 minutes. Envoy gives up on a call after its
      timeout, 20 ms by default.
- alert: TollgateConfigLoadFailed
  expr: increase(tollgate_config_loads_total{job="@JOB@", result="error"}[15m]) > 0
  for: 1m
  labels:
    severity: warning
  annotations:
    runbook_url: @RUNBOOK@#tollgateconfigloadfailed
    summary: 'tollgate {{ $labels.instance }}: a rules load failed'
    description: >-
      A rules load or reload on {{ $labels.instance }} failed in the last 15 minutes. The
      previous rules stay in force; the change that was meant to apply does not.
- alert: TollgateTenantNearLimit
  expr: |
    sum by (job, domain, key1, key2) (rate(ratelimit_service_rate_limit_near_limit{job="@JOB@"}[10m]))
      / sum by (job, domain, key1, key2) (rate(ratelimit_service_rate_limit_total_hits{job="@JOB@"}[10m]))
    > 0.1
  for: 15m
  labels:
    severity: info
  annotations:
    runbook_url: @RUNBOOK@#tollgatetenantnearlimit
    summary: 'Rule {{ $labels.domain }} {{ $labels.key1 }}{{ with $labels.key2 }} {{ . }}{{ end }} runs near its limit'
    description: >-
      {{ $value | humanizePercentage }} of the hits on {{ $labels.domain }}
      {{ $labels.key1 }}{{ with $labels.key2 }} {{ . }}{{ end }} have left its counter past NEAR_LIMIT_RATIO
      for 15 minutes: its callers use most of their limit.
- alert: TollgateTenantOverLimit
  expr: |
    sum by (job, domain, key1, key2) (rate(ratelimit_service_rate_limit_over_limit{job="@JOB@"}[10m]))
      / sum by (job, domain, key1, key2) (rate(ratelimit_service_rate_limit_total_hits{job="@JOB@"}[10m]))
    > 0.1
  for: 15m
  labels:
    severity: warning
  annotations:
    runbook_url: @RUNBOOK@#tollgatetenantoverlimit
    summary: 'Rule {{ $labels.domain }} {{ $labels.key1 }}{{ with $labels.key2 }} {{ . }}{{ end }} denies many hits'
    description: >-
      {{ $value | humanizePercentage }} of the hits on {{ $labels.domain }}
      {{ $labels.key1 }}{{ with $labels.key2 }} {{ . }}{{ end }} have been over its limit for 15 minutes.
- alert: TollgateRlqsOverAdmission
  expr: |
    sum by (job, instance) (rate(tollgate_rlqs_over_admitted_total{job="@JOB@"}[10m]))
      / sum by (job, instance) (rate(tollgate_rlqs_requests_reported_total{job="@JOB@", result="allowed"}[10m]))
    > 0.05
  for: 15m
  labels:
    severity: warning
  annotations:
    runbook_url: @RUNBOOK@#tollgaterlqsoveradmission
    summary: 'tollgate {{ $labels.instance }}: RLQS clients admit past their limits'
    description: >-
      {{ $value | humanizePercentage }} of the requests that RLQS clients of
      {{ $labels.instance }} reported allowed have been past their rule's limit for 15
      minutes, more than the 5% that RLQS keeps to at steady state: the clients let
      through more than their assignments allow.
- alert: TollgateRlqsStreamsRefused
  expr: increase(tollgate_bounds_reached_total{job="@JOB@", bound=~"rlqs_.*", bound!="rlqs_stale"}[15m]) > 0
  for: 1m
  labels:
    severity: warning
  annotations:
    runbook_url: @RUNBOOK@#tollgaterlqsstreamsrefused
    summary: 'tollgate {{ $labels.instance }}: RLQS streams end at {{ $labels.bound }}'
    description: >-
      RLQS streams on {{ $labels.instance }} were refused or ended at the bound
      {{ $labels.bound }} in the last 15 minutes. Their Envoys open them again; until one is
      answered, their buckets keep their last assignments, then fall back to the filter's
      behaviour without one.`}}
{{- end }}
