import { createServer, type IncomingMessage } from 'node:http';
import { describe, expect, it } from 'vitest';
import { codes, d, startTollgate } from '../support/tollgate.js';

// Tracing as a user turns it on: OTEL_EXPORTER_OTLP_ENDPOINT pointing at a collector. Here the
// collector is an HTTP server in this process that records what the service exports.

describe('tracing in the running service', () => {
  it('exports one ShouldRateLimit span per check to the OTLP endpoint', async () => {
    const bodies: string[] = [];
    const types: (string | undefined)[] = [];
    const receiver = createServer((request: IncomingMessage, response) => {
      const chunks: Buffer[] = [];
      request.on('data', (chunk: Buffer) => chunks.push(chunk));
      request.on('end', () => {
        if (request.url !== '/v1/traces') return response.writeHead(404).end();
        // Protobuf bodies: the strings of the spans are there as UTF-8 bytes.
        bodies.push(Buffer.concat(chunks).toString('utf8'));
        types.push(request.headers['content-type']);
        response.writeHead(200, { 'content-type': 'application/json' }).end('{}');
      });
    });
    await new Promise<void>((resolve) => receiver.listen(0, '127.0.0.1', resolve));
    const address = receiver.address();
    const port = typeof address === 'object' && address ? address.port : 0;

    const tollgate = await startTollgate({
      rules:
        'domain: traced\ndescriptors:\n  - key: k\n    rate_limit: {unit: hour, requests_per_unit: 1}\n',
      env: {
        OTEL_EXPORTER_OTLP_ENDPOINT: `http://127.0.0.1:${port}`,
        OTEL_SERVICE_NAME: 'tollgate-test',
      },
    });
    expect(codes(await tollgate.check({ domain: 'traced', descriptors: [d('k', 'v')] }))[0]).toBe(
      'OK',
    );
    expect(codes(await tollgate.check({ domain: 'traced', descriptors: [d('k', 'v')] }))[0]).toBe(
      'OVER_LIMIT',
    );
    expect(bodies).toEqual([]); // batched: nothing is sent until the batch is flushed
    await tollgate.stop(); // stopping flushes the spans still buffered
    receiver.close();

    expect(types).toEqual(['application/x-protobuf']); // OTLP's default protocol, http/protobuf
    const exported = bodies.join('\n');
    expect(exported.match(/ShouldRateLimit/g)).toHaveLength(2);
    for (const text of [
      'tollgate-test',
      'ratelimit.domain',
      'traced',
      'OVER_LIMIT',
      'tollgate.store.duration_ms',
    ]) {
      expect(exported).toContain(text);
    }
  });
});
