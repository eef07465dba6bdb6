import { createRequire } from 'node:module';
import { Metadata } from '@grpc/grpc-js';
import type * as GrpcExporter from '@opentelemetry/exporter-trace-otlp-grpc';
import type * as JsonExporter from '@opentelemetry/exporter-trace-otlp-http';
import type * as ProtoExporter from '@opentelemetry/exporter-trace-otlp-proto';
import type { SpanExporter } from '@opentelemetry/sdk-trace-base';
import { boolean, oneOf, optional, type Env } from '../core/envValues.js';
import { SettingsError } from '../core/errors.js';
import { redactUrls } from '../core/redact.js';

/**
 * An OpenTelemetry package, loaded when first asked for rather than when this module is: only a
 * service that traces pays for them. Each package's CommonJS build is the one `import` gives too.
 */
export const loadOpenTelemetry = createRequire(import.meta.url) as <T>(name: string) => T;

/**
 * The OTLP span exporter the standard OTEL_EXPORTER_OTLP_* variables describe, or undefined when
 * they name no endpoint. OTLP/HTTP with protobuf or JSON bodies, or OTLP/gRPC.
 *
 * The exporters would read process.env themselves; `env` may be another object, so the endpoint
 * and headers are passed explicitly. Timeouts, compression and certificates are still read from
 * process.env by the exporters.
 */
export function createOtlpExporter(env: Env): SpanExporter | undefined {
  const endpointName = inForce(env, 'ENDPOINT');
  // Nothing else is read, nor refused, while no endpoint is set.
  if (optional(env, endpointName) === undefined) return undefined;
  const protocol = oneOf(env, inForce(env, 'PROTOCOL'), PROTOCOLS, 'http/protobuf');
  const grpc = protocol === 'grpc';
  const url = endpoint(env, endpointName, grpc);
  const headers = {
    ...otlpHeaders(env, 'OTEL_EXPORTER_OTLP_HEADERS', grpc),
    ...otlpHeaders(env, 'OTEL_EXPORTER_OTLP_TRACES_HEADERS', grpc),
  };
  if (grpc) {
    const metadata = new Metadata();
    for (const [key, value] of Object.entries(headers)) metadata.set(key, value);
    // Either endpoint as it is, without its path: a gRPC call has none to add to. The exporter
    // picks its credentials from the scheme: TLS for https, plaintext for http.
    const { protocol: scheme, host } = new URL(url);
    const { OTLPTraceExporter } = loadOpenTelemetry<typeof GrpcExporter>(
      '@opentelemetry/exporter-trace-otlp-grpc',
    );
    return new OTLPTraceExporter({ url: `${scheme}//${host}`, metadata });
  }
  const { OTLPTraceExporter: Exporter } =
    protocol === 'http/json'
      ? loadOpenTelemetry<typeof JsonExporter>('@opentelemetry/exporter-trace-otlp-http')
      : loadOpenTelemetry<typeof ProtoExporter>('@opentelemetry/exporter-trace-otlp-proto');
  // OTLP/HTTP: the signal's own endpoint is used as it is; the general one gets `v1/traces`.
  return new Exporter({
    url:
      endpointName === 'OTEL_EXPORTER_OTLP_ENDPOINT' ? `${url.replace(/\/?$/, '/')}v1/traces` : url,
    headers,
  });
}

const PROTOCOLS = ['http/protobuf', 'http/json', 'grpc'] as const;

/** OTEL_EXPORTER_OTLP_TRACES_<setting> when it is set, which wins; else the general one. */
function inForce(env: Env, setting: string): string {
  const traces = `OTEL_EXPORTER_OTLP_TRACES_${setting}`;
  return optional(env, traces) ? traces : `OTEL_EXPORTER_OTLP_${setting}`;
}

/**
 * An http(s) URL. With `hostPort` (gRPC), also a bare `host:port`, which the OTLP exporter
 * specification says uses TLS unless OTEL_EXPORTER_OTLP_[TRACES_]INSECURE is true.
 */
function endpoint(env: Env, name: string, hostPort: boolean): string {
  const value = env[name] ?? '';
  if (hostPort && /^(\[[\da-f:.]+\]|[\w.-]+):\d+$/i.test(value)) {
    const insecure = boolean(env, inForce(env, 'INSECURE'), false);
    return `${insecure ? 'http' : 'https'}://${value}`;
  }
  // URL.parse would be shorter, but arrived in Node 20.18.
  if (URL.canParse(value) && /^https?:$/.test(new URL(value).protocol)) return value;
  const forms = hostPort
    ? 'an http:// or https:// URL, nor host:port'
    : 'an http:// or https:// URL';
  throw new SettingsError(`${name}: '${redactUrls(value)}' is not ${forms}`);
}

/**
 * `key=value,key2=value2`, values percent-encoded, as the OTLP exporter specification says. As
 * gRPC metadata, keys are letters, digits and `_.-` and values printable ASCII.
 */
function otlpHeaders(env: Env, name: string, grpc: boolean): Record<string, string> {
  const headers: Record<string, string> = {};
  for (const pair of optional(env, name)?.split(',') ?? []) {
    const at = pair.indexOf('=');
    const key = pair.slice(0, at).trim();
    // The values are often credentials: messages name the key only.
    if (at < 0 || key === '') throw new SettingsError(`${name}: an entry is not key=value`);
    let value;
    try {
      value = decodeURIComponent(pair.slice(at + 1).trim());
    } catch {
      throw new SettingsError(`${name}: the value of '${key}' is not percent-encoded`);
    }
    if (grpc && !(/^[\w.-]+$/.test(key) && !/-bin$/i.test(key) && /^[ -~]*$/.test(value))) {
      throw new SettingsError(
        `${name}: '${key}' cannot be gRPC metadata, whose keys are letters, digits and _.- (not ending in -bin) and values printable ASCII`,
      );
    }
    headers[key] = value;
  }
  return headers;
}
