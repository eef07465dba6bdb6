import { AsyncLocalStorage } from 'node:async_hooks';
import type * as Api from '@opentelemetry/api';
import type { Span, TextMapGetter } from '@opentelemetry/api';
import type * as Core from '@opentelemetry/core';
import type * as Resources from '@opentelemetry/resources';
import type * as TraceBase from '@opentelemetry/sdk-trace-base';
import type { SpanExporter } from '@opentelemetry/sdk-trace-base';
import type * as TraceNode from '@opentelemetry/sdk-trace-node';
import type * as Conventions from '@opentelemetry/semantic-conventions';
import type { RequestHeader } from '../core/check.js';
import { boolean, optional, type Env } from '../core/envValues.js';
import { InvalidRequestError } from '../core/errors.js';
import { createOtlpExporter, loadOpenTelemetry } from './otlpExporter.js';
import type { CheckEvent } from '../decision/outcome.js';

/**
 * OpenTelemetry tracing of checks: one SERVER span named ShouldRateLimit per check, continuing
 * the caller's trace (W3C Trace Context), sent over OTLP when the standard OTEL_* variables name
 * an endpoint. With otlpExporter.ts, the only module that uses `@opentelemetry/*`, and only once
 * tracing is on: loading it costs a process about 100 ms and 15 MB, which a service that does not
 * trace should not pay.
 */
export interface TracingOptions {
  /** OTEL_EXPORTER_OTLP_* (see createOtlpExporter), OTEL_SDK_DISABLED, OTEL_SERVICE_NAME. */
  env: Env;
  /** Tests: spans go here as each one ends, instead of over OTLP. Enables tracing. */
  exporter?: SpanExporter;
}

export interface Tracing {
  enabled: boolean;
  /**
   * Runs one check in a SERVER span named ShouldRateLimit, ended when it settles; records errors.
   * The span is a child of the caller's, from the request's `traceparent` and `tracestate`; an
   * invalid `traceparent` is ignored (a new trace). The headers are read only when enabled.
   */
  traceCheck<T>(run: () => Promise<T>, header?: RequestHeader): Promise<T>;
  /** The limiter's CheckObserver: describes the check on the span of the traceCheck it runs in. */
  observe(event: CheckEvent): void;
  /** Sends the spans still buffered, then stops. */
  shutdown(): Promise<void>;
}

/** How long a shutdown waits for the last spans to be exported. */
const SHUTDOWN_MS = 500;

const DISABLED: Tracing = {
  enabled: false,
  traceCheck: (run) => run(),
  observe: () => {},
  shutdown: () => Promise.resolve(),
};

export function createTracing(options: TracingOptions): Tracing {
  const { env } = options;
  let exporter = options.exporter;
  if (exporter === undefined) {
    if (boolean(env, 'OTEL_SDK_DISABLED', false)) return DISABLED;
    exporter = createOtlpExporter(env);
    if (exporter === undefined) return DISABLED;
  }
  const { ROOT_CONTEXT, SpanKind, SpanStatusCode } =
    loadOpenTelemetry<typeof Api>('@opentelemetry/api');
  const { W3CTraceContextPropagator } = loadOpenTelemetry<typeof Core>('@opentelemetry/core');
  const { defaultResource, resourceFromAttributes } = loadOpenTelemetry<typeof Resources>(
    '@opentelemetry/resources',
  );
  const { BatchSpanProcessor, SimpleSpanProcessor } = loadOpenTelemetry<typeof TraceBase>(
    '@opentelemetry/sdk-trace-base',
  );
  const { NodeTracerProvider } = loadOpenTelemetry<typeof TraceNode>(
    '@opentelemetry/sdk-trace-node',
  );
  const { ATTR_SERVICE_NAME } = loadOpenTelemetry<typeof Conventions>(
    '@opentelemetry/semantic-conventions',
  );
  const processor =
    options.exporter !== undefined
      ? new SimpleSpanProcessor(exporter)
      : new BatchSpanProcessor(exporter);
  const propagator = new W3CTraceContextPropagator();
  const headerGetter: TextMapGetter<RequestHeader> = {
    get: (header, name) => header(name),
    keys: () => propagator.fields(),
  };

  // Not registered globally: several services may share a process (tests), and a second
  // registration would fail. Without a global context manager, the check's span travels to
  // `observe` through this AsyncLocalStorage instead of the OpenTelemetry context. The sampler
  // and batch sizes are read from process.env by the SDK.
  const provider = new NodeTracerProvider({
    resource: defaultResource().merge(
      resourceFromAttributes(serviceAttributes(env, ATTR_SERVICE_NAME)),
    ),
    spanProcessors: [processor],
  });
  const tracer = provider.getTracer('tollgate');
  const checkSpan = new AsyncLocalStorage<Span>();

  return {
    enabled: true,

    async traceCheck(run, header) {
      // The provider's sampler (parent-based by default) honours the caller's sampled flag.
      const parent = header ? propagator.extract(ROOT_CONTEXT, header, headerGetter) : ROOT_CONTEXT;
      const span = tracer.startSpan('ShouldRateLimit', { kind: SpanKind.SERVER }, parent);
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

    // The last spans get half a second to leave: a collector that is gone or reads nothing must
    // not hold the exit (the exporter's own timeout is 10 s), nor fail it.
    shutdown: () => {
      let timer: NodeJS.Timeout | undefined;
      return Promise.race([
        provider.shutdown().catch(() => undefined),
        new Promise<void>((resolve) => (timer = setTimeout(resolve, SHUTDOWN_MS))),
      ]).finally(() => clearTimeout(timer));
    },
  };
}

/**
 * The service's name: OTEL_SERVICE_NAME, else the reference's TRACING_SERVICE_NAME (Envoy Gateway
 * sets it), else tollgate; and the reference's TRACING_SERVICE_NAMESPACE and _INSTANCE_ID.
 */
function serviceAttributes(env: Env, nameAttribute: string): Record<string, string> {
  const attributes: Record<string, string> = {
    [nameAttribute]:
      optional(env, 'OTEL_SERVICE_NAME') ?? optional(env, 'TRACING_SERVICE_NAME') ?? 'tollgate',
  };
  const namespace = optional(env, 'TRACING_SERVICE_NAMESPACE');
  const instance = optional(env, 'TRACING_SERVICE_INSTANCE_ID');
  if (namespace !== undefined) attributes['service.namespace'] = namespace;
  if (instance !== undefined) attributes['service.instance.id'] = instance;
  return attributes;
}
