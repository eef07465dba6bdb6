import type { ChildProcess } from 'node:child_process';
import * as grpc from '@grpc/grpc-js';
import {
  createRateLimitClient,
  type RateLimitClient,
  type RateLimitRequestObject,
} from '@tollgate/client';

/** The harness's own gRPC client: readiness probes and the over-admission check. */
export type Outcome = 'OK' | 'OVER_LIMIT' | string;

/**
 * `channels` clients with their own connections: grpc-js shares one connection among channels to
 * one address unless each has a local subchannel pool, and the point is several connections.
 */
export function openClients(address: string, channels: number): RateLimitClient[] {
  return Array.from({ length: channels }, () =>
    createRateLimitClient(address, grpc.credentials.createInsecure(), {
      'grpc.use_local_subchannel_pool': 1,
    }),
  );
}

/** The decision's overall code, or the gRPC status name when the call failed. */
export function check(
  client: RateLimitClient,
  request: RateLimitRequestObject,
  deadlineMs = 5_000,
): Promise<Outcome> {
  return new Promise((resolve) => {
    client.ShouldRateLimit(
      request,
      new grpc.Metadata(),
      { deadline: Date.now() + deadlineMs },
      (error, response) => {
        if (error) resolve(grpc.status[error.code] ?? `code ${error.code}`);
        else resolve(response?.overall_code ?? 'UNKNOWN');
      },
    );
  });
}

/** Resolves once the service answers OK; fails at once if its process exits first. */
export async function waitUntilAnswering(
  address: string,
  request: RateLimitRequestObject,
  child: ChildProcess,
  stderr: () => string,
): Promise<void> {
  const [client] = openClients(address, 1);
  const deadline = Date.now() + 20_000;
  try {
    for (;;) {
      if (child.exitCode !== null || child.signalCode !== null) {
        throw new Error(`${address}: the process exited (${child.exitCode}): ${stderr()}`);
      }
      const outcome = await check(client!, request, 1_000);
      if (outcome === 'OK') return;
      if (Date.now() > deadline) {
        throw new Error(`${address} did not answer OK within 20 s (last: ${outcome}): ${stderr()}`);
      }
      await new Promise((resolve) => setTimeout(resolve, 100));
    }
  } finally {
    client!.close();
  }
}
