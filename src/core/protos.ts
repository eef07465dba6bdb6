/**
 * Envoy's RLS v3 and RLQS v3 protos, loaded from the repository's `proto/` directory. `packageDefinition`
 * serves the server and reflection; `loadProtoRoot` gives the protobufjs roots that the
 * codec uses on the hot path.
 */
import { fileURLToPath } from 'node:url';
import * as protoLoader from '@grpc/proto-loader';
import protobuf from 'protobufjs';

/** src/core/ and dist/core/ both sit two levels below the repository root, beside proto/. */
export const protoDir = fileURLToPath(new URL('../../proto/', import.meta.url));
export const rlsProtoFile = 'envoy/service/ratelimit/v3/rls.proto';
export const rlsServiceName = 'envoy.service.ratelimit.v3.RateLimitService';
export const rlqsProtoFile = 'envoy/service/rate_limit_quota/v3/rlqs.proto';
export const rlqsServiceName = 'envoy.service.rate_limit_quota.v3.RateLimitQuotaService';

// google/protobuf/*.proto resolve to protobufjs' bundled copies before any include path is tried.
/** How proto-loader reads the repository's protos: wire names, enums and longs as strings. */
export const loaderOptions: protoLoader.Options = {
  keepCase: true,
  longs: String,
  enums: String,
  defaults: false,
  oneofs: true,
  includeDirs: [protoDir],
};

export const packageDefinition: protoLoader.PackageDefinition = protoLoader.loadSync(
  [rlsProtoFile, rlqsProtoFile],
  loaderOptions,
);

export const rlsService = packageDefinition[rlsServiceName] as protoLoader.ServiceDefinition;
const method = rlsService.ShouldRateLimit;
if (!method) throw new Error(`${rlsProtoFile} has no ${rlsServiceName}/ShouldRateLimit`);
/** ShouldRateLimit's path and proto-loader (de)serializers, for overriding one side of them. */
export const shouldRateLimitMethod = method;

/**
 * A protobufjs root of the RLS protos with wire field names. With `bytes`, the request's domain
 * and entry keys and values are declared `bytes`, which has the same wire form as `string` but
 * keeps invalid UTF-8 visible instead of replacing it.
 */
export function loadProtoRoot(variant: 'strings' | 'bytes' = 'strings'): protobuf.Root {
  const root = new protobuf.Root();
  root.resolvePath = (_origin, target) => `${protoDir}${target}`;
  root.loadSync(rlsProtoFile, { keepCase: true });
  if (variant === 'bytes') {
    redeclareAsBytes(root.lookupType('envoy.service.ratelimit.v3.RateLimitRequest'), ['domain']);
    redeclareAsBytes(
      root.lookupType('envoy.extensions.common.ratelimit.v3.RateLimitDescriptor.Entry'),
      ['key', 'value'],
    );
  }
  root.resolveAll();
  return root;
}

function redeclareAsBytes(type: protobuf.Type, names: string[]): void {
  for (const name of names) {
    const field = type.fields[name];
    if (!field) throw new Error(`${type.fullName} has no field ${name}`);
    type.remove(field);
    type.add(new protobuf.Field(name, field.id, 'bytes'));
  }
}
