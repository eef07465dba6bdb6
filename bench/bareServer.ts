import * as grpc from '@grpc/grpc-js';
import { encodeResponse } from '../src/grpc/codec.js';
import { shouldRateLimitMethod } from '../src/grpc/protos.js';

/**
 * The ceiling for any grpc-js service on this machine: a server that answers ShouldRateLimit
 * with one constant OK, decoding nothing. tollgate's throughput is measured against it.
 */
const REPLY = encodeResponse({ code: 'OK', statuses: [{ code: 'OK', limitRemaining: 0 }] });

export async function startBareServer(
  host: string,
  port: number,
): Promise<{ port: number; stop(): void }> {
  const server = new grpc.Server();
  server.addService(
    {
      ShouldRateLimit: {
        ...shouldRateLimitMethod,
        requestDeserialize: (bytes: Buffer) => bytes,
        responseSerialize: (bytes: Buffer) => bytes,
      },
    },
    {
      ShouldRateLimit: (_call: unknown, callback: grpc.sendUnaryData<Buffer>) =>
        callback(null, REPLY),
    },
  );
  const bound = await new Promise<number>((resolve, reject) =>
    server.bindAsync(`${host}:${port}`, grpc.ServerCredentials.createInsecure(), (error, p) =>
      error ? reject(error) : resolve(p),
    ),
  );
  return { port: bound, stop: () => server.forceShutdown() };
}
