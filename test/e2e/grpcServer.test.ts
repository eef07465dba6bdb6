import { describe, it, expect, beforeAll, afterAll } from 'vitest';
import { createRequire } from 'node:module';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import * as grpc from '@grpc/grpc-js';
import * as protoLoader from '@grpc/proto-loader';
import descriptor from 'protobufjs/ext/descriptor/index.js';
import { service as healthService } from 'grpc-health-check';
import type { Check, Decision } from '../../src/core/check.js';
import { StoreError } from '../../src/core/errors.js';
import { createGrpcServer, type GrpcServer, type Reply } from '../../src/servers/grpc/server.js';
import {
  loadProtoRoot,
  rlqsServiceName,
  rlsServiceName,
  shouldRateLimitMethod,
} from '../../src/core/protos.js';
import {
  createRateLimitClient,
  type RateLimitRequestObject,
  type RateLimitResponseObject,
} from '@tollgate/client';

/** A real decision from the check: each descriptor's value says its code, costs count down 10. */
async function decide(check: Check): Promise<Reply> {
  if (check.domain === 'store-down') throw new StoreError('redis timed out after 15ms', 'timeout');
  if (check.domain === 'bug') throw new TypeError('cannot read properties of undefined');
  const statuses = check.descriptors.map((d) => {
    const cost = Number(d.hitsAddend ?? BigInt(check.hitsAddend || 1));
    const over = d.entries.some((e) => e.value === 'over');
    return {
      code: over ? 'OVER_LIMIT' : 'OK',
      currentLimit: { requestsPerUnit: 10, unit: 'minute', name: d.entries[0]?.key ?? '' },
      limitRemaining: over ? 0 : 10 - cost,
      durationUntilResetMs: 1500,
    } as const;
  });
  const decision: Decision = {
    code: statuses.some((s) => s.code === 'OVER_LIMIT') ? 'OVER_LIMIT' : 'OK',
    statuses,
  };
  return { ...decision, headers: [{ key: 'RateLimit', value: `"${check.domain}";r=9;t=2` }] };
}

const internalErrors: unknown[] = [];
let server: GrpcServer;
let address: string;
let client: ReturnType<typeof createRateLimitClient>;

beforeAll(async () => {
  server = createGrpcServer({
    decide: (check) => {
      if (check.domain === 'sync-bug') throw new TypeError('thrown before any promise');
      return decide(check);
    },
    limits: { maxDescriptors: 64, maxEntries: 16, maxEntryBytes: 1024 },
    onInternalError: (error) => internalErrors.push(error),
  });
  address = `127.0.0.1:${await server.listen('127.0.0.1', 0)}`;
  client = createRateLimitClient(address);
});

afterAll(async () => {
  client.close();
  await server.shutdown(1000);
});

function call(request: RateLimitRequestObject): Promise<RateLimitResponseObject> {
  return new Promise((resolve, reject) =>
    client.ShouldRateLimit(request, (error, response) =>
      error ? reject(error) : resolve(response ?? {}),
    ),
  );
}
/** grpc-js types a generic client's methods as possibly absent; these tests know them. */
type Generic<Methods> = grpc.Client & Methods;

const failure = (request: RateLimitRequestObject) =>
  call(request).then(
    () => expect.unreachable('the call succeeded'),
    (error: grpc.ServiceError) => ({ code: grpc.status[error.code], details: error.details }),
  );

describe('the RLS service', () => {
  it('answers a decision with every field', async () => {
    const response = await call({
      domain: 'api',
      descriptors: [
        { entries: [{ key: 'tenant', value: 'acme' }], hits_addend: { value: '3' } },
        { entries: [{ key: 'route', value: 'over' }] },
      ],
    });
    expect(response).toEqual({
      overall_code: 'OVER_LIMIT',
      statuses: [
        {
          code: 'OK',
          current_limit: { requests_per_unit: 10, unit: 'MINUTE', name: 'tenant' },
          limit_remaining: 7,
          duration_until_reset: { seconds: '1', nanos: 500_000_000 },
        },
        {
          code: 'OVER_LIMIT',
          current_limit: { requests_per_unit: 10, unit: 'MINUTE', name: 'route' },
          limit_remaining: 0,
          duration_until_reset: { seconds: '1', nanos: 500_000_000 },
        },
      ],
      response_headers_to_add: [{ key: 'RateLimit', value: '"api";r=9;t=2' }],
    });
  });

  it('answers INVALID_ARGUMENT naming the fault', async () => {
    const one = [{ entries: [{ key: 'k', value: 'v' }] }];
    expect(await failure({ domain: '', descriptors: one })).toEqual({
      code: 'INVALID_ARGUMENT',
      details: 'domain is empty',
    });
    expect(await failure({ domain: 'api', descriptors: Array(65).fill(one[0]) })).toEqual({
      code: 'INVALID_ARGUMENT',
      details: '65 descriptors exceed MAX_DESCRIPTORS (64)',
    });
    expect(
      await failure({
        domain: 'api',
        descriptors: [{ entries: [{ key: 'k', value: 'v'.repeat(1_000_000) }] }],
      }),
    ).toEqual({
      code: 'INVALID_ARGUMENT',
      details: 'descriptors[0].entries[0].value is 1000000 bytes, over MAX_ENTRY_BYTES (1024)',
    });
  });

  it('answers INVALID_ARGUMENT for bytes that are not valid UTF-8', async () => {
    const RequestType = loadProtoRoot('bytes').lookupType(
      'envoy.service.ratelimit.v3.RateLimitRequest',
    );
    const RawClient = grpc.makeGenericClientConstructor(
      {
        ShouldRateLimit: {
          ...shouldRateLimitMethod,
          requestSerialize: (value: object) => Buffer.from(RequestType.encode(value).finish()),
        },
      },
      'RateLimitService',
    );
    const raw = new RawClient(address, grpc.credentials.createInsecure()) as unknown as Generic<{
      ShouldRateLimit(request: object, callback: (error: grpc.ServiceError) => void): void;
    }>;
    const request = {
      domain: Buffer.from('api'),
      descriptors: [{ entries: [{ key: Buffer.from('k'), value: Buffer.from([0x61, 0xff]) }] }],
    };
    const error = await new Promise<grpc.ServiceError>((resolve) =>
      raw.ShouldRateLimit(request, resolve),
    );
    raw.close();
    expect(error.code).toBe(grpc.status.INVALID_ARGUMENT);
    expect(error.details).toBe('descriptors[0].entries[0].value is not valid UTF-8');
  });

  it('answers UNAVAILABLE when the store fails, INTERNAL (never UNKNOWN) on a bug', async () => {
    const one = [{ entries: [{ key: 'k', value: 'v' }] }];
    expect(await failure({ domain: 'store-down', descriptors: one })).toEqual({
      code: 'UNAVAILABLE',
      details: 'store unavailable: redis timed out after 15ms',
    });
    expect(await failure({ domain: 'bug', descriptors: one })).toEqual({
      code: 'INTERNAL',
      details: 'internal error',
    });
    expect(await failure({ domain: 'sync-bug', descriptors: one })).toEqual({
      code: 'INTERNAL',
      details: 'internal error',
    });
    expect(internalErrors.map((e) => (e as Error).name)).toEqual(['TypeError', 'TypeError']);
  });
});

describe('health and reflection', () => {
  it('reports SERVING, then NOT_SERVING after setServing(false)', async () => {
    const Health = grpc.makeGenericClientConstructor(
      healthService as grpc.ServiceDefinition,
      'Health',
    );
    const health = new Health(address, grpc.credentials.createInsecure()) as unknown as Generic<{
      Check(request: object, callback: grpc.requestCallback<{ status: string }>): void;
    }>;
    const check = (service: string) =>
      new Promise<string>((resolve, reject) =>
        health.Check({ service }, (e, r) => (e ? reject(e) : resolve(r?.status ?? ''))),
      );
    expect([await check(''), await check(rlsServiceName)]).toEqual(['SERVING', 'SERVING']);
    server.setServing(false);
    expect([await check(''), await check(rlsServiceName)]).toEqual(['NOT_SERVING', 'NOT_SERVING']);
    server.setServing(true);
    expect(await check('')).toBe('SERVING');
    health.close();
  });

  it('lists the RLS, RLQS and health services, with descriptors Go clients accept', async () => {
    const protoPath = createRequire(import.meta.url).resolve(
      '@grpc/reflection/build/proto/grpc/reflection/v1/reflection.proto',
    );
    const definition = protoLoader.loadSync(protoPath, { keepCase: true });
    const Reflection = grpc.makeGenericClientConstructor(
      definition['grpc.reflection.v1.ServerReflection'] as grpc.ServiceDefinition,
      'ServerReflection',
    );
    const reflection = new Reflection(
      address,
      grpc.credentials.createInsecure(),
    ) as unknown as Generic<{
      ServerReflectionInfo(): grpc.ClientDuplexStream<object, Record<string, unknown>>;
    }>;
    const stream = reflection.ServerReflectionInfo();
    const replies: Record<string, unknown>[] = [];
    const done = new Promise<void>((resolve, reject) => {
      stream.on('data', (reply: Record<string, unknown>) => replies.push(reply));
      stream.on('end', resolve);
      stream.on('error', reject);
    });
    stream.write({ list_services: '' });
    stream.write({ file_containing_symbol: rlsServiceName });
    stream.write({ file_containing_symbol: 'grpc.health.v1.Health' });
    stream.write({ file_containing_symbol: rlqsServiceName });
    stream.end();
    await done;
    reflection.close();
    const listed = replies[0]?.list_services_response as { service: { name: string }[] };
    expect(listed.service.map((s) => s.name)).toEqual(
      expect.arrayContaining([rlsServiceName, rlqsServiceName, 'grpc.health.v1.Health']),
    );
    for (const reply of replies.slice(1)) {
      const files = reply.file_descriptor_response as { file_descriptor_proto: Buffer[] };
      expectGoCompatible(files.file_descriptor_proto.map((b) => FileDescriptorProto.decode(b)));
    }
  });
});

describe('shutdown', () => {
  it('listens on a Unix socket and cancels calls still running after the grace', async () => {
    const socket = `unix:${join(tmpdir(), `tollgate-${process.pid}.sock`)}`;
    const hanging = createGrpcServer({
      decide: () => new Promise<never>(() => undefined),
      limits: { maxDescriptors: 64, maxEntries: 16, maxEntryBytes: 1024 },
    });
    expect(await hanging.listen(socket)).toBe(0);
    const unixClient = createRateLimitClient(socket);
    const pending = new Promise<grpc.ServiceError | null>((resolve) =>
      unixClient.ShouldRateLimit(
        { domain: 'api', descriptors: [{ entries: [{ key: 'k', value: 'v' }] }] },
        (e) => resolve(e),
      ),
    );
    await new Promise((resolve) => setTimeout(resolve, 50)); // let the call reach the handler
    const started = Date.now();
    await hanging.shutdown(200);
    expect(Date.now() - started).toBeLessThan(1000);
    expect((await pending)?.code).toBeOneOf([grpc.status.CANCELLED, grpc.status.UNAVAILABLE]);
    unixClient.close();
  });
});

const { FileDescriptorProto } = descriptor;

interface FileProto {
  name: string;
  package: string;
  dependency: string[];
  messageType: MessageProto[];
  enumType: { name: string }[];
}
interface MessageProto {
  name: string;
  field: { name: string; typeName?: string }[];
  nestedType: MessageProto[];
  enumType: { name: string }[];
  options?: { mapEntry?: boolean };
}

/**
 * What Go's descriptor builder (behind grpcurl and ghz) demands of reflected files: each type a
 * field names is absolute and defined in its own file or a declared dependency, and a map's entry
 * type is named after its field plus "Entry".
 */
function expectGoCompatible(decoded: unknown[]): void {
  const files = decoded as FileProto[];
  const definedIn = new Map<string, string>();
  const index = (message: MessageProto, scope: string, file: string) => {
    const name = `${scope}.${message.name}`;
    definedIn.set(name, file);
    for (const e of message.enumType) definedIn.set(`${name}.${e.name}`, file);
    for (const nested of message.nestedType) index(nested, name, file);
  };
  for (const file of files) {
    for (const e of file.enumType) definedIn.set(`.${file.package}.${e.name}`, file.name);
    for (const message of file.messageType) index(message, `.${file.package}`, file.name);
  }
  const check = (message: MessageProto, file: FileProto) => {
    for (const field of message.field) {
      if (!field.typeName) continue; // a scalar
      const home = definedIn.get(field.typeName);
      expect(home, `${message.name}.${field.name}: ${field.typeName}`).toBeDefined();
      expect([file.name, ...file.dependency]).toContain(home);
    }
    for (const nested of message.nestedType) {
      if (nested.options?.mapEntry) expect(nested.name).toMatch(/Entry$/);
      check(nested, file);
    }
  };
  expect(files.length).toBeGreaterThan(0);
  for (const file of files) for (const message of file.messageType) check(message, file);
}
