import { describe, expect, it } from 'vitest';
import { startBareServer } from '../../bench/bareServer.js';
import { createRateLimitClient } from '../../src/grpc/protos.js';
import { callCheck, d } from '../support/tollgate.js';

// The benchmark's baseline must speak the same RPC as tollgate, or the comparison means nothing.
describe('the bare grpc-js baseline', () => {
  it('answers ShouldRateLimit with a constant OK', async () => {
    const bare = await startBareServer('127.0.0.1', 0);
    const client = createRateLimitClient(`127.0.0.1:${bare.port}`);
    try {
      const response = await callCheck(client, { domain: 'any', descriptors: [d('k', 'v')] });
      expect(response.overall_code).toBe('OK');
      expect(response.statuses?.map((s) => s.code)).toEqual(['OK']);
    } finally {
      client.close();
      bare.stop();
    }
  });
});
