{{/* The chart's name, or nameOverride. */}}
{{- define "tollgate.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* The objects' name: fullnameOverride, or the release's name with the chart's unless it holds it. */}}
{{- define "tollgate.fullname" -}}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- $name := default .Chart.Name .Values.nameOverride }}
{{- if contains $name .Release.Name }}
{{- .Release.Name | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" }}
{{- end }}
{{- end }}
{{- end }}

{{/* The labels that select the pods; they never change between upgrades. */}}
{{- define "tollgate.selectorLabels" -}}
app.kubernetes.io/name: {{ include "tollgate.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{- define "tollgate.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{ include "tollgate.selectorLabels" . }}
app.kubernetes.io/version: {{ .Values.image.tag | default .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end }}

{{- define "tollgate.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "tollgate.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- default "default" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{/* The Secret holding REDIS_URL and REDIS_AUTH, or "" when Redis is not set. */}}
{{- define "tollgate.redisSecret" -}}
{{- if .Values.redis.existingSecret }}
{{- .Values.redis.existingSecret }}
{{- else if .Values.redis.url }}
{{- printf "%s-redis" (include "tollgate.fullname" .) }}
{{- end }}
{{- end }}

{{- define "tollgate.rulesConfigMap" -}}
{{- default (printf "%s-rules" (include "tollgate.fullname" .)) .Values.rules.existingConfigMap }}
{{- end }}

{{/*
The readiness probe: gRPC health (grpc.health.v1, the overall service "") on the gRPC port, or
GET /healthcheck on the HTTP port while the gRPC port speaks TLS, which the kubelet's gRPC
probe cannot. Both turn NOT_SERVING when checks cannot be decided (docs/decisions.md: Health).
*/}}
{{- define "tollgate.readinessProbe" -}}
{{- if .Values.grpcTls.enabled -}}
httpGet:
  path: /healthcheck
  port: http
{{- else -}}
grpc:
  port: {{ .Values.ports.grpc }}
{{- end }}
{{- end }}
