// What Envoy Gateway's rate-limit Deployment sets for envoyproxy/ratelimit, which tollgate replaces.

/**
 * Every variable Envoy Gateway v1.9's rate-limit Deployment sets, with its values
 * (internal/infrastructure/kubernetes/ratelimit/resource.go): the defaults, then those for a
 * Redis backend with TLS and a client certificate, Prometheus, and tracing.
 */
export const ENVOY_GATEWAY_ENV: Record<string, string> = {
  RUNTIME_ROOT: '/data',
  RUNTIME_SUBDIRECTORY: 'ratelimit',
  RUNTIME_IGNOREDOTFILES: 'true',
  RUNTIME_WATCH_ROOT: 'false',
  LOG_LEVEL: 'info',
  USE_STATSD: 'false',
  CONFIG_TYPE: 'GRPC_XDS_SOTW',
  CONFIG_GRPC_XDS_SERVER_URL: 'envoy-gateway:18001',
  CONFIG_GRPC_XDS_NODE_ID: 'envoy-ratelimit',
  GRPC_SERVER_USE_TLS: 'true',
  GRPC_SERVER_TLS_CERT: '/certs/tls.crt',
  GRPC_SERVER_TLS_KEY: '/certs/tls.key',
  GRPC_SERVER_TLS_CA_CERT: '/certs/ca.crt',
  CONFIG_GRPC_XDS_SERVER_USE_TLS: 'true',
  CONFIG_GRPC_XDS_CLIENT_TLS_CERT: '/certs/tls.crt',
  CONFIG_GRPC_XDS_CLIENT_TLS_KEY: '/certs/tls.key',
  CONFIG_GRPC_XDS_SERVER_TLS_CACERT: '/certs/ca.crt',
  FORCE_START_WITHOUT_INITIAL_CONFIG: 'true',
  REDIS_SOCKET_TYPE: 'tcp',
  REDIS_URL: 'redis.redis-system.svc.cluster.local:6379',
  REDIS_TLS: 'true',
  REDIS_TLS_CLIENT_CERT: '/redis-certs/tls.crt',
  REDIS_TLS_CLIENT_KEY: '/redis-certs/tls.key',
  USE_PROMETHEUS: 'true',
  PROMETHEUS_ADDR: ':19001',
  PROMETHEUS_MAPPER_YAML: '/etc/statsd-exporter/conf.yaml',
  TRACING_ENABLED: 'true',
  TRACING_SERVICE_NAME: 'envoy-ratelimit',
  TRACING_SERVICE_NAMESPACE: 'envoy-gateway-system',
  TRACING_SERVICE_INSTANCE_ID: 'envoy-ratelimit-5d8f7c9b4-x2x7k',
  TRACING_SAMPLING_RATE: '1.0',
  OTEL_EXPORTER_OTLP_ENDPOINT: 'http://otel-collector.monitoring.svc.cluster.local:4318',
};
