import type { RateLimitClient } from '@tollgate/client';
import { callCheck, d } from './tollgate.js';

export interface Probe {
  /** The slowest answer so far, in ms, and how many calls failed or were refused. */
  stop(): Promise<{ slowestMs: number; calls: number; failed: number }>;
}

/**
 * Calls every 10 ms (domain `api`, tenant `probe`), timing each answer, until stopped: what a
 * caller sees while the service does something else, a reload say.
 */
export function probeCalls(tollgate: { client: RateLimitClient }): Probe {
  let stopped = false;
  let slowestMs = 0;
  let calls = 0;
  let failed = 0;
  const loop = (async () => {
    while (!stopped) {
      const started = performance.now();
      try {
        await callCheck(tollgate.client, { domain: 'api', descriptors: [d('tenant', 'probe')] });
      } catch {
        failed += 1;
      }
      calls += 1;
      slowestMs = Math.max(slowestMs, performance.now() - started);
      await new Promise((resolve) => setTimeout(resolve, 10));
    }
  })();
  return {
    async stop() {
      stopped = true;
      await loop;
      return { slowestMs, calls, failed };
    },
  };
}
