import { createServer, type IncomingHttpHeaders } from 'node:http';
import type { AddressInfo } from 'node:net';
import { fileURLToPath } from 'node:url';
import * as grpc from '@grpc/grpc-js';
import { loadSync } from '@grpc/proto-loader';

/**
 * An OTLP trace receiver, as a collector would be, in the test's process on a free port: OTLP
 * over gRPC (TraceService/Export), or over HTTP at any path with protobuf or JSON bodies. It
 * decodes what it is sent with OTLP's own field numbers (test/fixtures/otlp) and keeps it.
 */
export interface OtlpReceiver {
  /** For OTEL_EXPORTER_OTLP_ENDPOINT: `http://127.0.0.1:PORT`, or `https://127.0.0.1:PORT`. */
  endpoint: string;
  port: number;
  /** Every export request, oldest first. */
  requests: ReceivedExport[];
  /** The spans of every request, in the order sent. */
  spans(): ReceivedSpan[];
  close(): Promise<void>;
}

export interface ReceivedExport {
  /** The HTTP path, or the gRPC method's. */
  path: string;
  /** The HTTP headers, or the gRPC metadata (first value of each key). */
  headers: Record<string, unknown>;
  spans: ReceivedSpan[];
}

/** A span as the receiver decoded it: ids in lower-case hex, '' when absent. */
export interface ReceivedSpan {
  traceId: string;
  spanId: string;
  parentSpanId: string;
  traceState: string;
  name: string;
  /** OTLP's SpanKind: 2 is SERVER. */
  kind: number;
  attributes: Record<string, unknown>;
  /** The resource's attributes, e.g. service.name. */
  resource: Record<string, unknown>;
}

export const EXPORT_METHOD = '/opentelemetry.proto.collector.trace.v1.TraceService/Export';

const definition = loadSync(
  fileURLToPath(new URL('../fixtures/otlp/trace_service.proto', import.meta.url)),
  { longs: Number, defaults: true, oneofs: true },
);
const exportMethod = (
  definition['opentelemetry.proto.collector.trace.v1.TraceService'] as grpc.ServiceDefinition
).Export!;
const decodeRequest = (body: Buffer) => exportMethod.requestDeserialize(body) as ExportRequest;

// The decoded request: protobufjs objects from a protobuf body, or OTLP/JSON (ids in hex).
interface ExportRequest {
  resourceSpans: {
    resource?: { attributes: KeyValue[] };
    scopeSpans: { spans: Span[] }[];
  }[];
}
interface Span {
  traceId: Uint8Array | string;
  spanId: Uint8Array | string;
  parentSpanId?: Uint8Array | string;
  traceState?: string;
  name: string;
  kind: number;
  attributes: KeyValue[];
}
interface KeyValue {
  key: string;
  value: {
    stringValue?: string;
    boolValue?: boolean;
    intValue?: number | string;
    doubleValue?: number;
  };
}

const hex = (id: Uint8Array | string | undefined): string =>
  typeof id === 'string' ? id : Buffer.from(id ?? []).toString('hex');

function attributes(list: KeyValue[] | undefined): Record<string, unknown> {
  const result: Record<string, unknown> = {};
  for (const { key, value } of list ?? []) {
    const { stringValue, boolValue, intValue, doubleValue } = value;
    result[key] =
      stringValue ?? boolValue ?? doubleValue ?? (intValue === undefined ? null : Number(intValue));
  }
  return result;
}

function spansOf(request: ExportRequest): ReceivedSpan[] {
  return request.resourceSpans.flatMap((resourceSpans) =>
    resourceSpans.scopeSpans.flatMap((scope) =>
      scope.spans.map((span) => ({
        traceId: hex(span.traceId),
        spanId: hex(span.spanId),
        parentSpanId: hex(span.parentSpanId),
        traceState: span.traceState ?? '',
        name: span.name,
        kind: span.kind,
        attributes: attributes(span.attributes),
        resource: attributes(resourceSpans.resource?.attributes),
      })),
    ),
  );
}

function receiver(requests: ReceivedExport[], endpoint: string, port: number, close: () => void) {
  return {
    endpoint,
    port,
    requests,
    spans: () => requests.flatMap((request) => request.spans),
    close: () => Promise.resolve(close()),
  };
}

/** OTLP/gRPC, plaintext, or TLS with `tls` (a certificate for 127.0.0.1). */
export async function startGrpcReceiver(tls?: {
  cert: Buffer;
  key: Buffer;
}): Promise<OtlpReceiver> {
  const requests: ReceivedExport[] = [];
  const server = new grpc.Server();
  server.addService(
    { Export: exportMethod },
    {
      Export: (
        call: grpc.ServerUnaryCall<ExportRequest, object>,
        callback: grpc.sendUnaryData<object>,
      ) => {
        requests.push({
          path: EXPORT_METHOD,
          headers: call.metadata.getMap(),
          spans: spansOf(call.request),
        });
        callback(null, {});
      },
    },
  );
  const credentials = tls
    ? grpc.ServerCredentials.createSsl(null, [{ cert_chain: tls.cert, private_key: tls.key }])
    : grpc.ServerCredentials.createInsecure();
  const port = await new Promise<number>((resolve, reject) =>
    server.bindAsync('127.0.0.1:0', credentials, (error, bound) =>
      error ? reject(error) : resolve(bound),
    ),
  );
  const endpoint = tls ? `https://127.0.0.1:${port}` : `http://127.0.0.1:${port}`;
  return receiver(requests, endpoint, port, () => server.forceShutdown());
}

/** OTLP/HTTP at any path: bodies of application/json are OTLP/JSON, others protobuf. */
export async function startHttpReceiver(): Promise<OtlpReceiver> {
  const requests: ReceivedExport[] = [];
  const server = createServer((request, response) => {
    const chunks: Buffer[] = [];
    request.on('data', (chunk: Buffer) => chunks.push(chunk));
    request.on('end', () => {
      const body = Buffer.concat(chunks);
      const headers: IncomingHttpHeaders = request.headers;
      const json = headers['content-type'] === 'application/json';
      requests.push({
        path: request.url ?? '',
        headers,
        spans: spansOf(
          json ? (JSON.parse(body.toString('utf8')) as ExportRequest) : decodeRequest(body),
        ),
      });
      response
        .writeHead(200, { 'content-type': headers['content-type'] ?? '' })
        .end(json ? '{}' : '');
    });
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as AddressInfo;
  return receiver(requests, `http://127.0.0.1:${port}`, port, () => server.close());
}
