import * as grpc from '@grpc/grpc-js';
import { describe, expect, it } from 'vitest';
import type { RateLimitRequestObject } from '@tollgate/client';
import {
  EXPORT_METHOD,
  startGrpcReceiver,
  startHttpReceiver,
  type OtlpReceiver,
} from '../support/otlpReceiver.js';
import { codes, d, startTollgate, type Tollgate } from '../support/tollgate.js';

// Tracing as a user turns it on: OTEL_EXPORTER_OTLP_ENDPOINT pointing at a collector, which here
// is a receiver in this process that decodes what the service exports. Envoy, when it traces,
// sends the W3C `traceparent` (and `tracestate`) of its own span with each ShouldRateLimit call.

const CALLER_TRACE = '4bf92f3577b34da6a3ce929d0e0e4736';
const CALLER_SPAN = '00f067aa0ba902b7';
const JSON_TRACE = '0af7651916cd43dd8448eb211c80319c';

const RULES =
  'domain: traced\ndescriptors:\n  - key: k\n    rate_limit: {unit: hour, requests_per_unit: 100}\n';
/** A check of `count` descriptors: the count tells the spans apart. */
const request = (count: number): RateLimitRequestObject => ({
  domain: 'traced',
  descriptors: Array.from({ length: count }, (_, i) => d('k', String(i))),
});

/** ShouldRateLimit with these metadata; resolves with the overall code. */
function checkWith(tollgate: Tollgate, count: number, metadata: Record<string, string>) {
  const meta = new grpc.Metadata();
  for (const [key, text] of Object.entries(metadata)) meta.set(key, text);
  return new Promise<string>((resolve, reject) =>
    tollgate.client.ShouldRateLimit(
      request(count),
      meta,
      { deadline: Date.now() + 5_000 },
      (error, response) => (error ? reject(error) : resolve(codes(response!)[0]!)),
    ),
  );
}

const receivers: Record<string, () => Promise<OtlpReceiver>> = {
  grpc: () => startGrpcReceiver(),
  'http/protobuf': startHttpReceiver,
};

describe.each(['grpc', 'http/protobuf'])('tracing in the running service, over %s', (protocol) => {
  it("exports one ShouldRateLimit span per check, in the caller's trace", async () => {
    const receiver = await receivers[protocol]!();
    const tollgate = await startTollgate({
      rules: RULES,
      env: {
        OTEL_EXPORTER_OTLP_ENDPOINT: receiver.endpoint,
        OTEL_EXPORTER_OTLP_PROTOCOL: protocol,
        OTEL_EXPORTER_OTLP_HEADERS: 'x-tenant=acme,authorization=Bearer%20abc',
        OTEL_SERVICE_NAME: 'tollgate-test',
      },
    });
    try {
      const traceparent = (trace: string, flags: string) => `00-${trace}-${CALLER_SPAN}-${flags}`;
      const answers = [
        await checkWith(tollgate, 1, {
          traceparent: traceparent(CALLER_TRACE, '01'),
          tracestate: 'envoy=1',
        }),
        await checkWith(tollgate, 2, {}),
        // Invalid: a new trace, and the check is answered all the same.
        await checkWith(tollgate, 3, { traceparent: traceparent('0'.repeat(32), '01') }),
        await checkWith(tollgate, 4, { traceparent: 'not-a-traceparent' }),
        // Not sampled by the caller: no span.
        await checkWith(tollgate, 5, { traceparent: traceparent(CALLER_TRACE, '00') }),
      ];
      expect(answers).toEqual(['OK', 'OK', 'OK', 'OK', 'OK']);
      const json = await fetch(`${tollgate.httpUrl}/json`, {
        method: 'POST',
        headers: { traceparent: traceparent(JSON_TRACE, '01') },
        body: JSON.stringify(request(6)),
      });
      expect(json.status).toBe(200);
    } finally {
      await tollgate.stop(); // stopping flushes the spans still buffered
      await receiver.close();
    }

    const paths = receiver.requests.map(({ path }) => path);
    expect(new Set(paths)).toEqual(new Set([protocol === 'grpc' ? EXPORT_METHOD : '/v1/traces']));
    for (const { headers } of receiver.requests) {
      expect(headers).toMatchObject({ 'x-tenant': 'acme', authorization: 'Bearer abc' });
      // OTLP/HTTP's default bodies are protobuf; gRPC's content type is not metadata.
      if (protocol !== 'grpc') expect(headers['content-type']).toBe('application/x-protobuf');
    }
    const spans = receiver
      .spans()
      .sort(
        (a, b) =>
          Number(a.attributes['ratelimit.descriptors']) -
          Number(b.attributes['ratelimit.descriptors']),
      );
    expect(spans.map((span) => [span.name, span.kind, span.resource['service.name']])).toEqual(
      Array(5).fill(['ShouldRateLimit', 2, 'tollgate-test']),
    );
    expect(
      spans.map((span) => [span.traceId, span.parentSpanId, span.traceState, span.attributes]),
    ).toEqual([
      [
        CALLER_TRACE,
        CALLER_SPAN,
        'envoy=1',
        {
          'ratelimit.domain': 'traced',
          'ratelimit.descriptors': 1,
          'ratelimit.decision': 'OK',
          'tollgate.store.duration_ms': expect.any(Number),
        },
      ],
      // No traceparent, then two invalid ones: each a new trace, with no parent.
      [expect.any(String), '', '', expect.objectContaining({ 'ratelimit.descriptors': 2 })],
      [expect.any(String), '', '', expect.objectContaining({ 'ratelimit.descriptors': 3 })],
      [expect.any(String), '', '', expect.objectContaining({ 'ratelimit.descriptors': 4 })],
      // POST /json.
      [JSON_TRACE, CALLER_SPAN, '', expect.objectContaining({ 'ratelimit.descriptors': 6 })],
    ]);
    const traces = new Set(spans.map((span) => span.traceId));
    expect(traces.size).toBe(5);
    for (const span of spans) {
      expect(span.traceId).toMatch(/^[\da-f]{32}$/);
      expect(span.spanId).toMatch(/^[\da-f]{16}$/);
      expect(span.spanId).not.toBe(CALLER_SPAN);
    }
  });
});
