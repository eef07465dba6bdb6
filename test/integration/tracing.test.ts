import { spawnSync } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { setTimeout as sleep } from 'node:timers/promises';
import { SpanKind, SpanStatusCode } from '@opentelemetry/api';
import { InMemorySpanExporter } from '@opentelemetry/sdk-trace-base';
import { afterEach, describe, expect, it, vi } from 'vitest';
import type { Check, Decision, RequestHeader } from '../../src/core/check.js';
import { InvalidRequestError, SettingsError, StoreError } from '../../src/core/errors.js';
import type { CheckEvent } from '../../src/decision/outcome.js';
import { createTracing, type Tracing } from '../../src/observability/tracing.js';
import { makeCerts } from '../support/certs.js';
import {
  EXPORT_METHOD,
  startGrpcReceiver,
  startHttpReceiver,
  type OtlpReceiver,
} from '../support/otlpReceiver.js';

// The limiter calls `observe` from inside its own async call, after awaiting the store; this
// stands in for it, so each span is described by the check that ran in it.
async function decide(
  tracing: Tracing,
  domain: string,
  outcome: Partial<CheckEvent> & { decision: Decision | undefined },
  storeMs = 1,
): Promise<Decision> {
  await sleep(storeMs);
  const check: Check = {
    domain,
    descriptors: [{ entries: [{ key: 'tenant', value: 'acme' }] }],
    hitsAddend: 1,
  };
  tracing.observe({
    check,
    storeError: undefined,
    storeMs,
    unknownDomain: false,
    globalShadow: false,
    rules: [],
    ...outcome,
  });
  if (outcome.decision === undefined) throw outcome.storeError ?? new Error('no decision');
  return outcome.decision;
}

const OK: Decision = { code: 'OK', statuses: [{ code: 'OK', limitRemaining: 4 }] };
const OVER: Decision = {
  code: 'OVER_LIMIT',
  statuses: [{ code: 'OVER_LIMIT', limitRemaining: 0 }],
};

const started: Tracing[] = [];
function tracingWith(options: Parameters<typeof createTracing>[0]): Tracing {
  const tracing = createTracing(options);
  started.push(tracing);
  return tracing;
}
afterEach(async () => {
  await Promise.all(started.splice(0).map((tracing) => tracing.shutdown()));
});

describe('tracing into an exporter', () => {
  it('makes one ShouldRateLimit server span per check, described by the check', async () => {
    const exporter = new InMemorySpanExporter();
    const tracing = tracingWith({ env: {}, exporter });
    expect(tracing.enabled).toBe(true);

    expect(await tracing.traceCheck(() => decide(tracing, 'api', { decision: OK }, 3))).toBe(OK);
    await tracing.traceCheck(() => decide(tracing, 'api', { decision: OVER }));
    await tracing.traceCheck(() =>
      decide(tracing, 'nowhere', { decision: OK, unknownDomain: true }, 0),
    );

    const spans = exporter.getFinishedSpans();
    expect(spans.map((span) => [span.name, span.kind, span.status.code])).toEqual([
      ['ShouldRateLimit', SpanKind.SERVER, SpanStatusCode.UNSET],
      ['ShouldRateLimit', SpanKind.SERVER, SpanStatusCode.UNSET],
      ['ShouldRateLimit', SpanKind.SERVER, SpanStatusCode.UNSET],
    ]);
    expect(spans.map((span) => span.attributes)).toEqual([
      {
        'ratelimit.domain': 'api',
        'ratelimit.descriptors': 1,
        'ratelimit.decision': 'OK',
        'tollgate.store.duration_ms': 3,
      },
      {
        'ratelimit.domain': 'api',
        'ratelimit.descriptors': 1,
        'ratelimit.decision': 'OVER_LIMIT',
        'tollgate.store.duration_ms': 1,
      },
      {
        'ratelimit.domain': 'nowhere',
        'ratelimit.descriptors': 1,
        'ratelimit.decision': 'OK',
        'tollgate.store.duration_ms': 0,
        'tollgate.unknown_domain': true,
      },
    ]);
    expect(spans[0]!.resource.attributes['service.name']).toBe('tollgate');
    // Each check is a trace of its own.
    expect(new Set(spans.map((span) => span.spanContext().traceId)).size).toBe(3);
  });

  it('marks a failed check as an error and hands its error back unchanged', async () => {
    const exporter = new InMemorySpanExporter();
    const tracing = tracingWith({ env: {}, exporter });
    const failure = new StoreError('redis did not answer in 15ms', 'timeout');

    await expect(
      tracing.traceCheck(() =>
        decide(tracing, 'api', { decision: undefined, storeError: failure }),
      ),
    ).rejects.toBe(failure);

    const [span] = exporter.getFinishedSpans();
    expect(span!.status).toEqual({
      code: SpanStatusCode.ERROR,
      message: 'redis did not answer in 15ms',
    });
    expect(span!.attributes).toMatchObject({
      'ratelimit.decision': 'error',
      'tollgate.store.error': 'timeout',
    });
    expect(span!.events.map((event) => event.name)).toEqual(['exception']);
    expect(span!.events[0]!.attributes).toMatchObject({
      'exception.type': 'StoreError',
      'exception.message': 'redis did not answer in 15ms',
    });
  });

  it('records a decision FAILURE_MODE made after a store failure', async () => {
    const exporter = new InMemorySpanExporter();
    const tracing = tracingWith({ env: {}, exporter });
    const failure = new StoreError('connection refused', 'connection');

    await tracing.traceCheck(() => decide(tracing, 'api', { decision: OVER, storeError: failure }));

    const [span] = exporter.getFinishedSpans();
    expect(span!.status.code).toBe(SpanStatusCode.UNSET);
    expect(span!.attributes).toMatchObject({
      'ratelimit.decision': 'OVER_LIMIT',
      'tollgate.store.error': 'connection',
    });
  });

  it("records a bad request's error without marking the span failed, as gRPC servers do", async () => {
    const exporter = new InMemorySpanExporter();
    const tracing = tracingWith({ env: {}, exporter });
    const bad = new InvalidRequestError('descriptors[0].limit: unit UNKNOWN');

    await expect(tracing.traceCheck(() => Promise.reject(bad))).rejects.toBe(bad);

    const [span] = exporter.getFinishedSpans();
    expect(span!.status.code).toBe(SpanStatusCode.UNSET);
    expect(span!.events.map((event) => event.name)).toEqual(['exception']);
  });

  it('keeps concurrent checks apart', async () => {
    const exporter = new InMemorySpanExporter();
    const tracing = tracingWith({ env: {}, exporter });

    // Started in one order, each finishing later than the next: all in flight at once.
    const domains = ['a', 'b', 'c', 'd', 'e', 'f'];
    await Promise.all(
      domains.map((domain, i) =>
        tracing.traceCheck(() =>
          decide(tracing, domain, { decision: i % 2 ? OVER : OK }, (domains.length - i) * 5),
        ),
      ),
    );

    // The order they finish in is the timers'; on a loaded machine close ones may swap.
    const spans = exporter.getFinishedSpans();
    expect(spans.map((span) => span.attributes['ratelimit.domain']).sort()).toEqual(domains);
    for (const span of spans) {
      const i = domains.indexOf(span.attributes['ratelimit.domain'] as string);
      expect(span.attributes['ratelimit.decision']).toBe(i % 2 ? 'OVER_LIMIT' : 'OK');
      expect(span.attributes['tollgate.store.duration_ms']).toBe((domains.length - i) * 5);
    }
  });

  it('ignores an observation made outside any check', async () => {
    const exporter = new InMemorySpanExporter();
    const tracing = tracingWith({ env: {}, exporter });
    expect(await decide(tracing, 'api', { decision: OK })).toBe(OK);
    await tracing.traceCheck(() => Promise.resolve('unobserved'));
    expect(exporter.getFinishedSpans().map((span) => span.attributes)).toEqual([{}]);
  });
});

describe("continuing the caller's trace", () => {
  const TRACE = '4bf92f3577b34da6a3ce929d0e0e4736';
  const CALLER = '00f067aa0ba902b7';
  const headers =
    (values: Record<string, string | string[]>): RequestHeader =>
    (name) =>
      values[name];

  async function spanOf(header: RequestHeader) {
    const exporter = new InMemorySpanExporter();
    const tracing = tracingWith({ env: {}, exporter });
    await tracing.traceCheck(() => decide(tracing, 'api', { decision: OK }), header);
    return exporter.getFinishedSpans();
  }

  it("makes the span a child of the traceparent's span, with its tracestate", async () => {
    const [span] = await spanOf(
      headers({ traceparent: `00-${TRACE}-${CALLER}-01`, tracestate: ['vendor=a', 'other=b'] }),
    );
    expect(span!.spanContext().traceId).toBe(TRACE);
    expect(span!.spanContext().spanId).not.toBe(CALLER);
    expect(span!.parentSpanContext).toMatchObject({
      traceId: TRACE,
      spanId: CALLER,
      isRemote: true,
    });
    expect(span!.spanContext().traceState?.serialize()).toBe('vendor=a,other=b');
    expect(span!.attributes['ratelimit.decision']).toBe('OK');
  });

  it('records nothing when the caller did not sample its trace', async () => {
    expect(await spanOf(headers({ traceparent: `00-${TRACE}-${CALLER}-00` }))).toEqual([]);
  });

  it('starts a new trace when there is no traceparent, or an invalid one', async () => {
    for (const traceparent of [
      undefined,
      '',
      'garbage',
      `00-${'0'.repeat(32)}-${CALLER}-01`, // an all-zero trace id
      `00-${TRACE}-${'0'.repeat(16)}-01`, // an all-zero span id
      `00-${TRACE.toUpperCase()}-${CALLER}-01`, // hex is lower-case
      `ff-${TRACE}-${CALLER}-01`, // version ff is forbidden
      `00-${TRACE}-${CALLER}-01-extra`, // version 00 has four fields
      `00-${TRACE.slice(1)}-${CALLER}-01`,
    ]) {
      const [span] = await spanOf(headers(traceparent === undefined ? {} : { traceparent }));
      expect(span!.parentSpanContext, String(traceparent)).toBeUndefined();
      expect(span!.spanContext().traceId).not.toBe(TRACE);
    }
  });

  it('reads no header when tracing is off', async () => {
    const read: string[] = [];
    const tracing = createTracing({ env: {} });
    const header: RequestHeader = (name) => {
      read.push(name);
      return `00-${TRACE}-${CALLER}-01`;
    };
    expect(await tracing.traceCheck(() => decide(tracing, 'api', { decision: OK }), header)).toBe(
      OK,
    );
    expect(read).toEqual([]);
  });
});

describe('tracing over OTLP/HTTP', () => {
  const receivers: OtlpReceiver[] = [];
  afterEach(async () => {
    await Promise.all(receivers.splice(0).map((receiver) => receiver.close()));
  });
  async function receiver() {
    const started = await startHttpReceiver();
    receivers.push(started);
    return started;
  }

  it('sends the spans to OTEL_EXPORTER_OTLP_ENDPOINT/v1/traces when shut down', async () => {
    const { endpoint, requests, spans } = await receiver();
    const tracing = createTracing({
      env: {
        OTEL_EXPORTER_OTLP_ENDPOINT: endpoint,
        OTEL_EXPORTER_OTLP_PROTOCOL: 'http/json',
        OTEL_EXPORTER_OTLP_HEADERS: 'x-tenant=acme,authorization=Bearer%20abc',
      },
    });
    expect(tracing.enabled).toBe(true);

    await tracing.traceCheck(() => decide(tracing, 'checkout', { decision: OK }));
    await tracing.traceCheck(() => decide(tracing, 'checkout', { decision: OVER }));
    expect(requests).toEqual([]); // batched until a flush
    await tracing.shutdown();

    expect(requests.map(({ path }) => path)).toEqual(['/v1/traces']);
    expect(requests[0]!.headers).toMatchObject({
      'content-type': 'application/json',
      'x-tenant': 'acme',
      authorization: 'Bearer abc',
    });
    expect(
      spans().map((span) => [
        span.name,
        span.resource['service.name'],
        span.attributes['ratelimit.domain'],
        span.attributes['ratelimit.decision'],
      ]),
    ).toEqual([
      ['ShouldRateLimit', 'tollgate', 'checkout', 'OK'],
      ['ShouldRateLimit', 'tollgate', 'checkout', 'OVER_LIMIT'],
    ]);
  });

  it('uses OTEL_EXPORTER_OTLP_TRACES_ENDPOINT as it is, and OTEL_SERVICE_NAME', async () => {
    const { endpoint, requests, spans } = await receiver();
    const tracing = createTracing({
      env: {
        OTEL_EXPORTER_OTLP_ENDPOINT: 'http://127.0.0.1:9/unused',
        OTEL_EXPORTER_OTLP_TRACES_ENDPOINT: `${endpoint}/collector/traces`,
        OTEL_EXPORTER_OTLP_TRACES_PROTOCOL: 'HTTP/JSON',
        OTEL_SERVICE_NAME: 'edge-ratelimit',
      },
    });

    await tracing.traceCheck(() => decide(tracing, 'checkout', { decision: OK }));
    await tracing.shutdown();

    expect(requests.map(({ path, headers }) => [path, headers['content-type']])).toEqual([
      ['/collector/traces', 'application/json'],
    ]);
    expect(spans()[0]!.resource['service.name']).toBe('edge-ratelimit');
  });

  it('is off without an endpoint, whatever else is set, or with OTEL_SDK_DISABLED=true', async () => {
    const { endpoint, requests } = await receiver();
    for (const env of [
      {},
      { OTEL_EXPORTER_OTLP_ENDPOINT: '' },
      { OTEL_EXPORTER_OTLP_PROTOCOL: 'grpc' },
      // Unread while there is no endpoint.
      { OTEL_EXPORTER_OTLP_PROTOCOL: 'thrift', OTEL_EXPORTER_OTLP_HEADERS: 'nonsense' },
      { OTEL_EXPORTER_OTLP_ENDPOINT: endpoint, OTEL_SDK_DISABLED: 'TRUE' },
    ]) {
      const tracing = createTracing({ env });
      expect(tracing.enabled).toBe(false);
      expect(await tracing.traceCheck(() => decide(tracing, 'checkout', { decision: OVER }))).toBe(
        OVER,
      );
      const failure = new StoreError('down', 'connection');
      await expect(tracing.traceCheck(() => Promise.reject(failure))).rejects.toBe(failure);
      await tracing.shutdown();
    }
    expect(requests).toEqual([]);
  });
});

describe('tracing over OTLP/gRPC', () => {
  const receivers: OtlpReceiver[] = [];
  afterEach(async () => {
    await Promise.all(receivers.splice(0).map((receiver) => receiver.close()));
  });
  async function receiver(tls?: { cert: Buffer; key: Buffer }) {
    const started = await startGrpcReceiver(tls);
    receivers.push(started);
    return started;
  }
  async function exportOneSpan(env: Record<string, string>): Promise<void> {
    const tracing = createTracing({ env });
    await tracing.traceCheck(() => decide(tracing, 'checkout', { decision: OK }));
    await tracing.shutdown();
  }

  it('calls TraceService/Export at the endpoint as it is, with the headers as metadata', async () => {
    const { endpoint, requests, spans } = await receiver();
    await exportOneSpan({
      // A path cannot be used by a gRPC call: it is not appended to, nor sent.
      OTEL_EXPORTER_OTLP_ENDPOINT: `${endpoint}/ignored`,
      OTEL_EXPORTER_OTLP_PROTOCOL: 'grpc',
      OTEL_EXPORTER_OTLP_HEADERS: 'x-tenant=acme,authorization=Bearer%20abc',
      OTEL_EXPORTER_OTLP_TRACES_HEADERS: 'X-Tenant=beta',
    });

    expect(requests.map(({ path }) => path)).toEqual([EXPORT_METHOD]);
    expect(requests[0]!.headers).toMatchObject({
      'x-tenant': 'beta',
      authorization: 'Bearer abc',
    });
    expect(spans().map((span) => [span.name, span.attributes['ratelimit.decision']])).toEqual([
      ['ShouldRateLimit', 'OK'],
    ]);
  });

  it('speaks TLS to an https endpoint, or to host:port unless OTEL_EXPORTER_OTLP_INSECURE', async () => {
    const certs = makeCerts();
    const tls = await receiver({
      cert: readFileSync(certs.server.cert),
      key: readFileSync(certs.server.key),
    });
    const plain = await receiver();
    // The exporter reads its certificates from the process's environment, as the SDK does.
    vi.stubEnv('OTEL_EXPORTER_OTLP_CERTIFICATE', certs.ca);
    try {
      await exportOneSpan({
        OTEL_EXPORTER_OTLP_TRACES_ENDPOINT: tls.endpoint,
        OTEL_EXPORTER_OTLP_TRACES_PROTOCOL: 'grpc',
      });
      await exportOneSpan({
        OTEL_EXPORTER_OTLP_ENDPOINT: `127.0.0.1:${tls.port}`,
        OTEL_EXPORTER_OTLP_PROTOCOL: 'grpc',
      });
      await exportOneSpan({
        OTEL_EXPORTER_OTLP_ENDPOINT: `127.0.0.1:${plain.port}`,
        OTEL_EXPORTER_OTLP_PROTOCOL: 'grpc',
        OTEL_EXPORTER_OTLP_INSECURE: 'true',
      });
    } finally {
      vi.unstubAllEnvs();
    }
    expect(tls.spans()).toHaveLength(2);
    expect(plain.spans()).toHaveLength(1);
  });
});

describe('OTLP settings', () => {
  const refused = (env: Record<string, string>) => () => createTracing({ env });

  it('refuses settings it cannot honour, naming them', () => {
    expect(refused({ OTEL_EXPORTER_OTLP_ENDPOINT: 'collector:4318' })).toThrow(
      new SettingsError(
        "OTEL_EXPORTER_OTLP_ENDPOINT: 'collector:4318' is not an http:// or https:// URL",
      ),
    );
    expect(
      refused({
        OTEL_EXPORTER_OTLP_TRACES_ENDPOINT: 'grpc://user:secret@collector',
        OTEL_EXPORTER_OTLP_PROTOCOL: 'grpc',
      }),
    ).toThrow(
      new SettingsError(
        "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT: 'grpc://user:***@collector' is not an http:// or https:// URL, nor host:port",
      ),
    );
    expect(
      refused({
        OTEL_EXPORTER_OTLP_ENDPOINT: 'http://collector:4317',
        OTEL_EXPORTER_OTLP_PROTOCOL: 'thrift',
      }),
    ).toThrow(
      new SettingsError(
        "OTEL_EXPORTER_OTLP_PROTOCOL: 'thrift' is not one of http/protobuf, http/json, grpc",
      ),
    );
    expect(
      refused({
        OTEL_EXPORTER_OTLP_ENDPOINT: 'collector:4317',
        OTEL_EXPORTER_OTLP_PROTOCOL: 'grpc',
        OTEL_EXPORTER_OTLP_INSECURE: 'maybe',
      }),
    ).toThrow(new SettingsError("OTEL_EXPORTER_OTLP_INSECURE: 'maybe' is not true or false"));
    expect(
      refused({
        OTEL_EXPORTER_OTLP_ENDPOINT: 'http://collector:4318',
        OTEL_EXPORTER_OTLP_HEADERS: 'api-key secret',
      }),
    ).toThrow(new SettingsError('OTEL_EXPORTER_OTLP_HEADERS: an entry is not key=value'));
  });

  it('refuses headers that gRPC metadata cannot carry, without quoting their values', () => {
    for (const [headers, key] of [
      ['api key=secret', 'api key'],
      ['token=s%C3%A9cret', 'token'], // not ASCII
      ['token-bin=secret', 'token-bin'], // binary metadata
    ] as const) {
      const create = refused({
        OTEL_EXPORTER_OTLP_ENDPOINT: 'http://collector:4317',
        OTEL_EXPORTER_OTLP_PROTOCOL: 'grpc',
        OTEL_EXPORTER_OTLP_TRACES_HEADERS: headers,
      });
      expect(create).toThrow(SettingsError);
      expect(create).toThrow(`OTEL_EXPORTER_OTLP_TRACES_HEADERS: '${key}' cannot be gRPC metadata`);
      expect(create).not.toThrow(/cret/);
    }
    // Over HTTP, the same headers are taken.
    const http = createTracing({
      env: {
        OTEL_EXPORTER_OTLP_ENDPOINT: 'http://127.0.0.1:9',
        OTEL_EXPORTER_OTLP_TRACES_HEADERS: 'token=s%C3%A9cret',
      },
    });
    expect(http.enabled).toBe(true);
    return http.shutdown();
  });
});

describe("OpenTelemetry's SDK", () => {
  // The built tracing module in a process of its own, which reports the OpenTelemetry packages
  // that creating its tracing loaded.
  const loadedWith = (env: Record<string, string>): string[] => {
    const script = `
      const { createTracing } = await import('./dist/observability/tracing.js');
      const tracing = createTracing({ env: ${JSON.stringify(env)} });
      const { createRequire } = await import('node:module');
      const cache = createRequire(import.meta.url).cache;
      const names = Object.keys(cache).flatMap((path) => path.match(/@opentelemetry\\/[^/]+/g) ?? []);
      console.log(JSON.stringify([...new Set(names)].sort()));
      await tracing.shutdown();`;
    const run = spawnSync(process.execPath, ['--input-type=module', '-e', script], {
      encoding: 'utf8',
    });
    expect(run.status, run.stderr).toBe(0);
    return JSON.parse(run.stdout) as string[];
  };

  it('is loaded only when tracing is on', () => {
    expect(loadedWith({})).toEqual([]);
    expect(loadedWith({ OTEL_EXPORTER_OTLP_ENDPOINT: 'http://127.0.0.1:4318' })).toEqual(
      expect.arrayContaining([
        '@opentelemetry/exporter-trace-otlp-proto',
        '@opentelemetry/sdk-trace-base',
        '@opentelemetry/sdk-trace-node',
      ]),
    );
  });
});
