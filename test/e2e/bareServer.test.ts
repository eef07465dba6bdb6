import { describe, expect, it } from 'vitest';
import { startBareServer, type BareKind } from '../../bench/bareServer.js';
import { createRateLimitClient } from '@tollgate/client';
import { callCheck, d } from '../support/tollgate.js';

// The benchmark's baselines must speak the same RPC as tollgate, or the comparison means nothing.
describe.each<BareKind>(['grpc-js', 'http2'])('the bare %s baseline', (kind) => {
  it('answers ShouldRateLimit with a constant OK to a grpc-js client', async () => {
    const bare = await startBareServer(kind, '127.0.0.1', 0);
    const client = createRateLimitClient(`127.0.0.1:${bare.port}`);
    try {
      for (let i = 0; i < 3; i += 1) {
        const response = await callCheck(client, { domain: 'any', descriptors: [d('k', 'v')] });
        expect(response.overall_code).toBe('OK');
        expect(response.statuses?.map((s) => s.code)).toEqual(['OK']);
      }
    } finally {
      client.close();
      bare.stop();
    }
  });
});
