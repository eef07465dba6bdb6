/**
 * ShouldRateLimit over grpc-js, with the request and response as proto-loader objects spell
 * them: wire field names, enums and 64-bit integers as strings. tollgate's own tests and tools
 * use this client too, so that there is one.
 */
import { join } from 'node:path';
import * as grpc from '@grpc/grpc-js';
import * as protoLoader from '@grpc/proto-loader';

// This module runs only as CommonJS (the ES entry re-exports the CommonJS build), so __dirname is
// dist/, beside the proto/ that the build copies from the repository's protos.
const protoDir = join(__dirname, '..', 'proto');
const rlsProtoFile = 'envoy/service/ratelimit/v3/rls.proto';
const rlsServiceName = 'envoy.service.ratelimit.v3.RateLimitService';

/** The request as proto-loader objects spell it: wire names, enums as strings, longs as strings. */
export interface RateLimitRequestObject {
  domain?: string;
  descriptors?: {
    entries?: { key?: string; value?: string }[];
    limit?: { requests_per_unit?: number; unit?: string | number };
    hits_addend?: { value?: string | number };
    is_negative_hits?: boolean;
  }[];
  hits_addend?: number;
}

export interface RateLimitResponseObject {
  overall_code?: 'UNKNOWN' | 'OK' | 'OVER_LIMIT';
  statuses?: {
    code?: 'UNKNOWN' | 'OK' | 'OVER_LIMIT';
    current_limit?: { requests_per_unit?: number; unit?: string; name?: string };
    limit_remaining?: number;
    duration_until_reset?: { seconds?: string; nanos?: number };
  }[];
  response_headers_to_add?: { key?: string; value?: string }[];
  /** google.protobuf.Struct, as proto-loader gives it. */
  dynamic_metadata?: { fields?: Record<string, unknown> };
}

export interface RateLimitClient extends grpc.Client {
  ShouldRateLimit(
    request: RateLimitRequestObject,
    callback: grpc.requestCallback<RateLimitResponseObject>,
  ): grpc.ClientUnaryCall;
  ShouldRateLimit(
    request: RateLimitRequestObject,
    metadata: grpc.Metadata,
    options: grpc.CallOptions,
    callback: grpc.requestCallback<RateLimitResponseObject>,
  ): grpc.ClientUnaryCall;
}

let constructor: grpc.ServiceClientConstructor | undefined;

/** Loads the protos on first use, so that importing the package reads no files. */
function rlsClientConstructor(): grpc.ServiceClientConstructor {
  if (!constructor) {
    const definition = protoLoader.loadSync(rlsProtoFile, {
      keepCase: true,
      longs: String,
      enums: String,
      defaults: false,
      oneofs: true,
      includeDirs: [protoDir],
    });
    const service = definition[rlsServiceName] as grpc.ServiceDefinition;
    constructor = grpc.makeGenericClientConstructor(service, 'RateLimitService');
  }
  return constructor;
}

/**
 * A grpc-js client of ShouldRateLimit that answers with Envoy's whole response, for tools that
 * drive the wire. Insecure unless told otherwise. grpc-js backs reconnects off up to two
 * minutes; a limiter's callers want tollgate back sooner, so reconnects here wait at most a
 * second.
 */
export function createRateLimitClient(
  address: string,
  credentials: grpc.ChannelCredentials = grpc.credentials.createInsecure(),
  channelOptions: grpc.ChannelOptions = {},
): RateLimitClient {
  const Client = rlsClientConstructor();
  return new Client(address, credentials, {
    'grpc.max_reconnect_backoff_ms': 1_000,
    ...channelOptions,
  }) as unknown as RateLimitClient;
}
