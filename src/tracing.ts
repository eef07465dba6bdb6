import { AsyncLocalStorage } from 'node:async_hooks';
import { SpanKind, SpanStatusCode, type Span } from '@opentelemetry/api';
import { OTLPTraceExporter } from '@opentelemetry/exporter-trace-otlp-http';
import { OTLPTraceExporter as OTLPProtoTraceExporter } from '@opentelemetry/exporter-trace-otlp-proto';
import { defaultResource, resourceFromAttributes } from '@opentelemetry/resources';
import {
  BatchSpanProcessor,
  SimpleSpanProcessor,
  type SpanExporter,
} from '@opentelemetry/sdk-trace-base';
import { NodeTracerProvider } from '@opentelemetry/sdk-trace-node';
import { ATTR_SERVICE_NAME } from '@opentelemetry/semantic-conventions';
import { optional, type Env } from './envValues.js';
import { InvalidRequestError, SettingsError } from './errors.js';
import { redactUrls } from './redact.js';
import type { CheckEvent } from './outcome.js';

/**
 * OpenTelemetry tracing of checks: one SERVER span named ShouldRateLimit per check, sent over
 * OTLP/HTTP when the standard OTEL_* variables name an endpoint. The only module that imports
 * `@opentelemetry/*`.
 */
export interface TracingOptions {
  /** OTEL_EXPORTER_OTLP_[TRACES_]ENDPOINT, _HEADERS, OTEL_SDK_DISABLED, OTEL_SERVICE_NAME. */
  env: Env;
  /** Tests: spans go here as each one ends, instead of over OTLP. Enables tracing. */
  exporter?: SpanExporter;
}

export interface Tracing {
  enabled: boolean;
  /** Runs one check in a SERVER span named ShouldRateLimit, ended when it settles; records errors. */
  traceCheck<T>(run: () => Promise<T>): Promise<T>;
  /** The limiter's CheckObserver: describes the check on the span of the traceCheck it runs in. */
  observe(event: CheckEvent): void;
  /** Sends the spans still buffered, then stops. */
  shutdown(): Promise<void>;
}

const DISABLED: Tracing = {
  enabled: false,
  traceCheck: (run) => run(),
  observe: () => {},
  shutdown: () => Promise.resolve(),
};

export function createTracing(options: TracingOptions): Tracing {
  const { env } = options;
  let processor;
  if (options.exporter !== undefined) {
    processor = new SimpleSpanProcessor(options.exporter);
  } else {
    if (optional(env, 'OTEL_SDK_DISABLED')?.toLowerCase() === 'true') return DISABLED;
    const url = tracesUrl(env);
    if (url === undefined) return DISABLED;
    // OTLP over HTTP, with protobuf bodies (the OpenTelemetry default) or JSON. OTLP over gRPC
    // would need another exporter, so it is refused rather than failing every export in silence.
    const protocolName = optional(env, 'OTEL_EXPORTER_OTLP_TRACES_PROTOCOL')
      ? 'OTEL_EXPORTER_OTLP_TRACES_PROTOCOL'
      : 'OTEL_EXPORTER_OTLP_PROTOCOL';
    const protocol = optional(env, protocolName) ?? 'http/protobuf';
    if (protocol !== 'http/json' && protocol !== 'http/protobuf') {
      throw new SettingsError(
        `${protocolName}: '${protocol}' is not supported: use http/protobuf or http/json`,
      );
    }
    // The exporter would read process.env itself; `env` may be another object, so its endpoint
    // and headers are passed explicitly. Timeouts, compression, certificates, the sampler and
    // batch sizes are still read from process.env by the SDK.
    const headers = {
      ...otlpHeaders(env, 'OTEL_EXPORTER_OTLP_HEADERS'),
      ...otlpHeaders(env, 'OTEL_EXPORTER_OTLP_TRACES_HEADERS'),
    };
    const Exporter = protocol === 'http/json' ? OTLPTraceExporter : OTLPProtoTraceExporter;
    processor = new BatchSpanProcessor(new Exporter({ url, headers }));
  }

  // Not registered globally: several services may share a process (tests), and a second
  // registration would fail. Without a global context manager, the check's span travels to
  // `observe` through this AsyncLocalStorage instead of the OpenTelemetry context.
  const provider = new NodeTracerProvider({
    resource: defaultResource().merge(
      resourceFromAttributes({
        [ATTR_SERVICE_NAME]: optional(env, 'OTEL_SERVICE_NAME') ?? 'tollgate',
      }),
    ),
    spanProcessors: [processor],
  });
  const tracer = provider.getTracer('tollgate');
  const checkSpan = new AsyncLocalStorage<Span>();

  return {
    enabled: true,

    async traceCheck(run) {
      const span = tracer.startSpan('ShouldRateLimit', { kind: SpanKind.SERVER });
      try {
        return await checkSpan.run(span, run);
      } catch (error) {
        span.recordException(error instanceof Error ? error : String(error));
        // As gRPC server spans do: a request the caller got wrong is not the service's error.
        if (!(error instanceof InvalidRequestError)) {
          span.setStatus({
            code: SpanStatusCode.ERROR,
            message: error instanceof Error ? error.message : String(error),
          });
        }
        throw error;
      } finally {
        span.end();
      }
    },

    observe(event) {
      const span = checkSpan.getStore();
      if (span === undefined || !span.isRecording()) return;
      span.setAttributes({
        'ratelimit.domain': event.check.domain,
        'ratelimit.descriptors': event.check.descriptors.length,
        'ratelimit.decision': event.decision?.code ?? 'error',
        'tollgate.store.duration_ms': event.storeMs,
      });
      if (event.storeError !== undefined) {
        span.setAttribute('tollgate.store.error', event.storeError.kind);
      }
      if (event.unknownDomain) span.setAttribute('tollgate.unknown_domain', true);
    },

    shutdown: () => provider.shutdown(),
  };
}

/** The signal's own endpoint is used as it is; the general one gets `v1/traces` appended. */
function tracesUrl(env: Env): string | undefined {
  const traces = httpUrl(env, 'OTEL_EXPORTER_OTLP_TRACES_ENDPOINT');
  if (traces !== undefined) return traces;
  const base = httpUrl(env, 'OTEL_EXPORTER_OTLP_ENDPOINT');
  return base === undefined ? undefined : `${base.replace(/\/?$/, '/')}v1/traces`;
}

function httpUrl(env: Env, name: string): string | undefined {
  const value = optional(env, name);
  // URL.parse would be shorter, but arrived in Node 20.18.
  if (value !== undefined && !(URL.canParse(value) && /^https?:$/.test(new URL(value).protocol))) {
    throw new SettingsError(`${name}: '${redactUrls(value)}' is not an http:// or https:// URL`);
  }
  return value;
}

/** `key=value,key2=value2`, values percent-encoded, as the OTLP exporter specification says. */
function otlpHeaders(env: Env, name: string): Record<string, string> {
  const headers: Record<string, string> = {};
  for (const pair of optional(env, name)?.split(',') ?? []) {
    const at = pair.indexOf('=');
    const key = pair.slice(0, at).trim();
    // The values are often credentials: messages name the key only.
    if (at < 0 || key === '') throw new SettingsError(`${name}: an entry is not key=value`);
    try {
      headers[key] = decodeURIComponent(pair.slice(at + 1).trim());
    } catch {
      throw new SettingsError(`${name}: the value of '${key}' is not percent-encoded`);
    }
  }
  return headers;
}
