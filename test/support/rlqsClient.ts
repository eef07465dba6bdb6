import * as grpc from '@grpc/grpc-js';
import * as protoLoader from '@grpc/proto-loader';
import { service as healthService } from 'grpc-health-check';
import { loaderOptions, protoDir, rlqsProtoFile, rlqsServiceName } from '../../src/core/protos.js';

/**
 * A plain StreamRateLimitQuotas client for tests that speak RLQS message by message (the fleet
 * simulator, rlqsSim.ts, plays whole Envoys instead).
 */
type Duplex = grpc.ClientDuplexStream<object, Record<string, unknown>>;

let Client: grpc.ServiceClientConstructor | undefined;

function clientConstructor(): grpc.ServiceClientConstructor {
  if (Client) return Client;
  const definition = protoLoader.loadSync(rlqsProtoFile, {
    ...loaderOptions,
    includeDirs: [protoDir],
  });
  const pkg = grpc.loadPackageDefinition(definition) as unknown as {
    envoy: {
      service: {
        rate_limit_quota: { v3: { RateLimitQuotaService: grpc.ServiceClientConstructor } };
      };
    };
  };
  Client = pkg.envoy.service.rate_limit_quota.v3.RateLimitQuotaService;
  return Client;
}

export interface RlqsTestStream {
  stream: Duplex;
  /** The client's channel, e.g. for channelz. */
  channel: grpc.ChannelInterface;
  /** The next response, waiting for it when none is queued. */
  next(): Promise<Record<string, unknown>>;
  /** How the stream ended. */
  ended: Promise<grpc.StatusObject>;
  close(): void;
}

/**
 * A stream to `address`, with a queue of what it received, and how it ended. `options`: the
 * channel's (`grpc.use_local_subchannel_pool` gives it a connection of its own).
 */
export function openRlqs(address: string, options: grpc.ChannelOptions = {}): RlqsTestStream {
  const Constructor = clientConstructor();
  const client = new Constructor(address, grpc.credentials.createInsecure(), options);
  const stream = (client as unknown as { StreamRateLimitQuotas(): Duplex }).StreamRateLimitQuotas();
  const received: Record<string, unknown>[] = [];
  const waiting: (() => void)[] = [];
  const ended = new Promise<grpc.StatusObject>((resolve) => stream.on('status', resolve));
  stream.on('error', () => undefined);
  stream.on('data', (message) => {
    received.push(message);
    waiting.shift()?.();
  });
  const next = async (): Promise<Record<string, unknown>> => {
    if (received.length === 0) await new Promise<void>((resolve) => waiting.push(resolve));
    return received.shift()!;
  };
  const close = () => {
    stream.end();
    client.close();
  };
  return { stream, channel: client.getChannel(), next, ended, close };
}

/** A usage report of one bucket over one second; the domain goes in a stream's first. */
export function usageReport(
  bucket: Record<string, string>,
  allowed: number,
  domain?: string,
  denied = 0,
): object {
  return {
    ...(domain ? { domain } : {}),
    bucket_quota_usages: [
      {
        bucket_id: { bucket },
        time_elapsed: { seconds: 1 },
        num_requests_allowed: allowed,
        num_requests_denied: denied,
      },
    ],
  };
}

/** grpc.health.v1's answer for the RLQS service's name. */
export async function rlqsHealth(address: string): Promise<string> {
  const HealthClient = grpc.makeClientConstructor(healthService, 'grpc.health.v1.Health');
  const health = new HealthClient(address, grpc.credentials.createInsecure()) as unknown as {
    check(request: object, done: (error: unknown, reply: { status: string }) => void): void;
    close(): void;
  };
  try {
    const reply = await new Promise<{ status: string }>((resolve, reject) =>
      health.check({ service: rlqsServiceName }, (e, r) => (e ? reject(e) : resolve(r))),
    );
    return reply.status;
  } finally {
    health.close();
  }
}

/**
 * The first bucket action of a response: its assignment's TTL in seconds, and its token bucket's
 * rate in tokens a second (0 for a blanket rule).
 */
export function firstAssignment(response: Record<string, unknown>): {
  ttlSeconds: number;
  rate: number;
} {
  const action = (
    response as {
      bucket_action: {
        quota_assignment_action: {
          assignment_time_to_live: { seconds: string };
          rate_limit_strategy: {
            token_bucket?: {
              tokens_per_fill: { value: number };
              fill_interval: { seconds: string };
            };
          };
        };
      }[];
    }
  ).bucket_action[0]!.quota_assignment_action;
  const bucket = action.rate_limit_strategy.token_bucket;
  return {
    ttlSeconds: Number(action.assignment_time_to_live.seconds),
    rate: bucket ? bucket.tokens_per_fill.value / Number(bucket.fill_interval.seconds) : 0,
  };
}
