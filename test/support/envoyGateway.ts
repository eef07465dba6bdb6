// What Envoy Gateway's rate-limit Deployment sets for envoyproxy/ratelimit, which tollgate replaces,
// and the certificates it mounts. From Envoy Gateway v1.9.1's source:
// internal/infrastructure/kubernetes/ratelimit/resource.go (the container) and
// internal/crypto/certgen.go (the certificates).
import { execFileSync } from 'node:child_process';
import { X509Certificate } from 'node:crypto';
import { mkdirSync, mkdtempSync, readFileSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

/** Set in every case (expectedRateLimitContainerEnv), in Envoy Gateway's order. */
export const ENVOY_GATEWAY_BASE_ENV: Record<string, string> = {
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
};

/** With `rateLimit.backend.redis.url`: the URL as given, host:port. */
export const ENVOY_GATEWAY_REDIS_ENV: Record<string, string> = {
  REDIS_SOCKET_TYPE: 'tcp',
  REDIS_URL: 'redis.redis-system.svc.cluster.local:6379',
};

/** With `redis.tls`, and its `certificateRef`. */
export const ENVOY_GATEWAY_REDIS_TLS_ENV: Record<string, string> = {
  REDIS_TLS: 'true',
  REDIS_TLS_CLIENT_CERT: '/redis-certs/tls.crt',
  REDIS_TLS_CLIENT_KEY: '/redis-certs/tls.key',
};

/** Unless `rateLimit.telemetry.metrics.prometheus.disable`; no PROMETHEUS_PATH (so /metrics). */
export const ENVOY_GATEWAY_PROMETHEUS_ENV: Record<string, string> = {
  USE_PROMETHEUS: 'true',
  PROMETHEUS_ADDR: ':19001',
  PROMETHEUS_MAPPER_YAML: '/etc/statsd-exporter/conf.yaml',
};

/** With `rateLimit.telemetry.tracing.provider.url`. */
export const ENVOY_GATEWAY_TRACING_ENV: Record<string, string> = {
  TRACING_ENABLED: 'true',
  TRACING_SERVICE_NAME: 'envoy-ratelimit',
  TRACING_SERVICE_NAMESPACE: 'envoy-gateway-system',
  TRACING_SERVICE_INSTANCE_ID: 'envoy-ratelimit-5d8f7c9b4-x2x7k',
  TRACING_SAMPLING_RATE: '1.0',
  OTEL_EXPORTER_OTLP_ENDPOINT: 'http://otel-collector.monitoring.svc.cluster.local:4318',
};

/** Every variable Envoy Gateway v1.9.1's rate-limit Deployment sets, each branch taken. */
export const ENVOY_GATEWAY_ENV: Record<string, string> = {
  ...ENVOY_GATEWAY_BASE_ENV,
  ...ENVOY_GATEWAY_REDIS_ENV,
  ...ENVOY_GATEWAY_REDIS_TLS_ENV,
  ...ENVOY_GATEWAY_PROMETHEUS_ENV,
  ...ENVOY_GATEWAY_TRACING_ENV,
};

/** What the pod's probes (startup, readiness, liveness alike) GET: no container port declares it. */
export const ENVOY_GATEWAY_PROBE = { path: '/healthcheck', port: 8080 };

/**
 * The node id and resource type of Envoy Gateway's rate-limit xDS server
 * (internal/globalratelimit/runner), which serves on :18001 over TLS 1.3 and requires client
 * certificates signed by its CA.
 */
export const ENVOY_GATEWAY_NODE_ID = 'envoy-ratelimit';

/** The namespace of Envoy Gateway's Helm chart, and of the rate-limit Deployment. */
export const ENVOY_GATEWAY_NAMESPACE = 'envoy-gateway-system';

/** The names in the controller's certificate (certgen's kubeServiceNames), in that namespace. */
export const ENVOY_GATEWAY_XDS_NAMES = [
  'envoy-gateway',
  `envoy-gateway.${ENVOY_GATEWAY_NAMESPACE}`,
  `envoy-gateway.${ENVOY_GATEWAY_NAMESPACE}.svc`,
  `envoy-gateway.${ENVOY_GATEWAY_NAMESPACE}.svc.cluster.local`,
];

/** Where the Secret `envoy-rate-limit` is mounted: tls.crt, tls.key, ca.crt. */
export const ENVOY_GATEWAY_CERTS_DIR = '/certs';

/** One of the Secrets Envoy Gateway's certgen writes: a folder of ca.crt, tls.crt and tls.key. */
export interface SecretDir {
  dir: string;
  ca: string;
  cert: string;
  key: string;
  /** tls.crt's serial number in upper-case hex, as node:crypto reports it. */
  serialNumber: string;
}

export interface EnvoyGatewayCerts {
  /** `envoy-gateway`: the controller's, served by its xDS server. */
  gateway: SecretDir;
  /** `envoy`: the proxies', which they present to the rate-limit service. */
  envoy: SecretDir;
  /** `envoy-rate-limit`: the rate-limit pod's /certs, its server and xDS client certificate. */
  rateLimit: SecretDir;
}

// certgen's key usages (no extended key usage), for RSA keys; a config of our own so that the
// system's openssl.cnf adds nothing.
const CONFIG = `
[req]
distinguished_name = dn
prompt = no
[dn]
CN = unused
[ca]
basicConstraints = critical, CA:TRUE
keyUsage = critical, keyCertSign, digitalSignature, keyEncipherment
[leaf]
basicConstraints = CA:FALSE
keyUsage = digitalSignature, nonRepudiation, keyEncipherment, dataEncipherment
subjectAltName = $ENV::SAN
`;

/**
 * The certificates of Envoy Gateway's certgen for the namespace envoy-gateway-system, each
 * Secret as a folder laid out as it is mounted: a CA named envoy-gateway; the controller's
 * certificate for the Service's names, and `localhost` besides, since a test cannot resolve
 * `envoy-gateway`; and the proxies' and the rate-limit pod's, both CN `*` for `*.envoy-gateway-system`.
 */
export function makeEnvoyGatewayCerts(): EnvoyGatewayCerts {
  const root = mkdtempSync(join(tmpdir(), 'tollgate-eg-certs-'));
  const config = join(root, 'openssl.cnf');
  writeFileSync(config, CONFIG);
  const ca = join(root, 'ca.crt');
  const caKey = join(root, 'ca.key');
  const openssl = (san: string, ...args: string[]) =>
    execFileSync('openssl', ['req', '-x509', '-config', config, '-days', '2', ...args], {
      env: { ...process.env, SAN: san },
      stdio: ['ignore', 'ignore', 'pipe'],
    });
  const rsa = ['-newkey', 'rsa:2048', '-nodes'];
  openssl(
    'DNS:envoy-gateway',
    '-extensions',
    'ca',
    ...rsa,
    '-subj',
    '/CN=envoy-gateway',
    '-keyout',
    caKey,
    '-out',
    ca,
  );
  let serial = 0;
  const secret = (name: string, cn: string, san: string): SecretDir => {
    const dir = join(root, name);
    mkdirSync(dir);
    const cert = join(dir, 'tls.crt');
    const key = join(dir, 'tls.key');
    serial += 1;
    openssl(
      san,
      '-extensions',
      'leaf',
      ...rsa,
      '-subj',
      `/CN=${cn}`,
      '-keyout',
      key,
      '-out',
      cert,
      '-CA',
      ca,
      '-CAkey',
      caKey,
      '-set_serial',
      `${Date.now()}${serial}`,
    );
    writeFileSync(join(dir, 'ca.crt'), readFileSync(ca));
    const serialNumber = new X509Certificate(readFileSync(cert)).serialNumber;
    return { dir, ca: join(dir, 'ca.crt'), cert, key, serialNumber };
  };
  const ns = ENVOY_GATEWAY_NAMESPACE;
  const gatewayNames = [...ENVOY_GATEWAY_XDS_NAMES, 'localhost'];
  return {
    gateway: secret(
      'envoy-gateway',
      'envoy-gateway',
      gatewayNames.map((n) => `DNS:${n}`).join(','),
    ),
    envoy: secret('envoy', '*', `DNS:*.${ns}`),
    rateLimit: secret('envoy-rate-limit', '*', `DNS:*.${ns}`),
  };
}
