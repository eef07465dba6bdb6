import { createServer, type IncomingMessage } from 'node:http';
import { describe, expect, it } from 'vitest';
import { codes, d, startTollgate } from '../support/tollgate.js';

// Tracing as a user turns it on: OTEL_EXPORTER_OTLP_ENDPOINT pointing at a collector. Here the
// collector is an HTTP server in this process that records what the service exports.

describe('tracing in the running service', () => {
  it('exports one ShouldRateLimit span per check to the OTLP endpoint', async () => {
    const bodies: string[] = [];
    const receiver = createServer((request: IncomingMessage, response) => {
      const chunks: Buffer[] = [];
      request.on('data', (chunk: Buffer) => chunks.push(chunk));
      request.on('end', () => {
        if (request.url === '/v1/traces') bodies.push(Buffer.concat(chunks).toString('utf8'));
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

    const exported = bodies.join('\n');
    expect(exported.match(/"ShouldRateLimit"/g)).toHaveLength(2);
    expect(exported).toContain('tollgate-test');
    expect(exported).toContain('"ratelimit.domain"');
    expect(exported).toContain('"traced"');
    expect(exported).toContain('"OVER_LIMIT"');
    expect(exported).toContain('"tollgate.store.duration_ms"');
  });
});
