import type { RateLimitClient } from '@tollgate/client';
import { callCheck, d } from './tollgate.js';

export interface ProbeResult {
  /** The slowest answer, in ms. */
  slowestMs: number;
  /** The median and 99th percentile answer, in ms. */
  p50Ms: number;
  p99Ms: number;
  calls: number;
  /** Calls that failed or were refused, with the first few errors' messages. */
  failed: number;
  errors: string[];
}

export interface Probe {
  /** Stops calling, and tells how the calls went. */
  stop(): Promise<ProbeResult>;
}

/**
 * Calls every 10 ms (domain `api`, tenant `probe`), timing each answer, until stopped: what a
 * caller sees while the service does something else, a reload say.
 */
export function probeCalls(tollgate: { client: RateLimitClient }): Probe {
  let stopped = false;
  const times: number[] = [];
  const errors: string[] = [];
  let failed = 0;
  const loop = (async () => {
    while (!stopped) {
      const started = performance.now();
      try {
        await callCheck(tollgate.client, { domain: 'api', descriptors: [d('tenant', 'probe')] });
      } catch (error) {
        failed += 1;
        if (errors.length < 5) errors.push((error as Error).message);
      }
      times.push(performance.now() - started);
      await new Promise((resolve) => setTimeout(resolve, 10));
    }
  })();
  return {
    async stop() {
      stopped = true;
      await loop;
      const sorted = [...times].sort((a, b) => a - b);
      const at = (q: number) => sorted[Math.min(sorted.length - 1, Math.floor(q * sorted.length))];
      return {
        slowestMs: sorted.at(-1) ?? 0,
        p50Ms: at(0.5) ?? 0,
        p99Ms: at(0.99) ?? 0,
        calls: times.length,
        failed,
        errors,
      };
    },
  };
}
