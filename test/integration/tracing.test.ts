import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { setTimeout as sleep } from 'node:timers/promises';
import { SpanKind, SpanStatusCode } from '@opentelemetry/api';
import { InMemorySpanExporter } from '@opentelemetry/sdk-trace-base';
import { afterEach, describe, expect, it } from 'vitest';
import type { Check, Decision } from '../../src/check.js';
import { InvalidRequestError, SettingsError, StoreError } from '../../src/errors.js';
import type { CheckEvent } from '../../src/outcome.js';
import { createTracing, type Tracing } from '../../src/tracing.js';

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

interface Received {
  method: string | undefined;
  url: string | undefined;
  headers: Record<string, string | string[] | undefined>;
  body: string;
}

/** An OTLP/HTTP receiver on a free port that keeps what it is sent. */
async function startReceiver(): Promise<{ url: string; received: Received[]; server: Server }> {
  const received: Received[] = [];
  const server = createServer((request, response) => {
    const chunks: Buffer[] = [];
    request.on('data', (chunk: Buffer) => chunks.push(chunk));
    request.on('end', () => {
      received.push({
        method: request.method,
        url: request.url,
        headers: request.headers,
        body: Buffer.concat(chunks).toString('utf8'),
      });
      response.writeHead(200, { 'content-type': 'application/json' }).end('{}');
    });
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as AddressInfo;
  return { url: `http://127.0.0.1:${port}`, received, server };
}

interface OtlpAttribute {
  key: string;
  value: { stringValue?: string; intValue?: number | string; boolValue?: boolean };
}
interface OtlpSpan {
  name: string;
  kind: number;
  attributes: OtlpAttribute[];
}
interface OtlpBody {
  resourceSpans: {
    resource: { attributes: OtlpAttribute[] };
    scopeSpans: { spans: OtlpSpan[] }[];
  }[];
}

function attribute(attributes: OtlpAttribute[], key: string): unknown {
  const value = attributes.find((attribute) => attribute.key === key)?.value;
  return value?.stringValue ?? value?.intValue ?? value?.boolValue;
}

describe('tracing over OTLP/HTTP', () => {
  const receivers: Server[] = [];
  afterEach(() => {
    for (const server of receivers.splice(0)) server.close();
  });
  async function receiver() {
    const started = await startReceiver();
    receivers.push(started.server);
    return started;
  }

  it('sends the spans to OTEL_EXPORTER_OTLP_ENDPOINT/v1/traces when shut down', async () => {
    const { url, received } = await receiver();
    const tracing = createTracing({
      env: {
        OTEL_EXPORTER_OTLP_ENDPOINT: url,
        OTEL_EXPORTER_OTLP_PROTOCOL: 'http/json',
        OTEL_EXPORTER_OTLP_HEADERS: 'x-tenant=acme,authorization=Bearer%20abc',
      },
    });
    expect(tracing.enabled).toBe(true);

    await tracing.traceCheck(() => decide(tracing, 'checkout', { decision: OK }));
    await tracing.traceCheck(() => decide(tracing, 'checkout', { decision: OVER }));
    expect(received).toEqual([]); // batched until a flush
    await tracing.shutdown();

    expect(received.map(({ method, url }) => [method, url])).toEqual([['POST', '/v1/traces']]);
    const request = received[0]!;
    expect(request.headers).toMatchObject({
      'content-type': 'application/json',
      'x-tenant': 'acme',
      authorization: 'Bearer abc',
    });
    const body = JSON.parse(request.body) as OtlpBody;
    const resourceSpans = body.resourceSpans[0]!;
    expect(attribute(resourceSpans.resource.attributes, 'service.name')).toBe('tollgate');
    const spans = resourceSpans.scopeSpans.flatMap((scope) => scope.spans);
    expect(
      spans.map((span) => [
        span.name,
        attribute(span.attributes, 'ratelimit.domain'),
        attribute(span.attributes, 'ratelimit.decision'),
      ]),
    ).toEqual([
      ['ShouldRateLimit', 'checkout', 'OK'],
      ['ShouldRateLimit', 'checkout', 'OVER_LIMIT'],
    ]);
  });

  it('uses OTEL_EXPORTER_OTLP_TRACES_ENDPOINT as it is, and OTEL_SERVICE_NAME', async () => {
    const { url, received } = await receiver();
    const tracing = createTracing({
      env: {
        OTEL_EXPORTER_OTLP_ENDPOINT: 'http://127.0.0.1:9/unused',
        OTEL_EXPORTER_OTLP_TRACES_ENDPOINT: `${url}/collector/traces`,
        OTEL_EXPORTER_OTLP_TRACES_PROTOCOL: 'http/json',
        OTEL_SERVICE_NAME: 'edge-ratelimit',
      },
    });

    await tracing.traceCheck(() => decide(tracing, 'checkout', { decision: OK }));
    await tracing.shutdown();

    expect(received.map(({ url }) => url)).toEqual(['/collector/traces']);
    const body = JSON.parse(received[0]!.body) as OtlpBody;
    expect(attribute(body.resourceSpans[0]!.resource.attributes, 'service.name')).toBe(
      'edge-ratelimit',
    );
  });

  it('is off without an endpoint, or with OTEL_SDK_DISABLED=true', async () => {
    const { url, received } = await receiver();
    for (const env of [
      {},
      { OTEL_EXPORTER_OTLP_ENDPOINT: '' },
      { OTEL_EXPORTER_OTLP_ENDPOINT: url, OTEL_SDK_DISABLED: 'TRUE' },
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
    expect(received).toEqual([]);
  });

  it('refuses settings it cannot honour, naming them', () => {
    expect(() => createTracing({ env: { OTEL_EXPORTER_OTLP_ENDPOINT: 'collector:4318' } })).toThrow(
      new SettingsError(
        "OTEL_EXPORTER_OTLP_ENDPOINT: 'collector:4318' is not an http:// or https:// URL",
      ),
    );
    expect(() =>
      createTracing({
        env: {
          OTEL_EXPORTER_OTLP_ENDPOINT: 'http://collector:4317',
          OTEL_EXPORTER_OTLP_PROTOCOL: 'grpc',
        },
      }),
    ).toThrow(
      new SettingsError(
        "OTEL_EXPORTER_OTLP_PROTOCOL: 'grpc' is not supported: use http/protobuf or http/json",
      ),
    );
    expect(() =>
      createTracing({
        env: {
          OTEL_EXPORTER_OTLP_ENDPOINT: 'http://collector:4318',
          OTEL_EXPORTER_OTLP_HEADERS: 'api-key secret',
        },
      }),
    ).toThrow(new SettingsError('OTEL_EXPORTER_OTLP_HEADERS: an entry is not key=value'));
  });
});
