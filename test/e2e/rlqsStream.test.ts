// StreamRateLimitQuotas over a real gRPC server and client, on the in-memory store: reports in,
// assignments out; health and bounds of its own; the short-call guard does not end its streams.
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import http2 from 'node:http2';
import { setTimeout as sleep } from 'node:timers/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import * as grpc from '@grpc/grpc-js';
import type * as protoLoader from '@grpc/proto-loader';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ownCounting } from '../../src/decision/counting.js';
import { ruleQuota } from '../../src/decision/quota.js';
import { packageDefinition, rlqsServiceName } from '../../src/core/protos.js';
import { loadRules } from '../../src/rules/loadRules.js';
import { createMemoryDemand } from '../../src/store/demand.js';
import { createSession } from '../../src/rlqs/session.js';
import { createRlqsService, type RlqsService } from '../../src/servers/grpc/rlqsStream.js';
import {
  createGrpcServer,
  RLQS_STREAM_PATH,
  type GrpcServer,
} from '../../src/servers/grpc/server.js';
import { createMemoryStore } from '../../src/store/memoryStore.js';
import { grpcFrame } from '../support/rawGrpc.js';
import { openRlqs, rlqsHealth, usageReport } from '../support/rlqsClient.js';

const dir = mkdtempSync(join(tmpdir(), 'tollgate-rlqs-stream-'));
const rulesFile = join(dir, 'rules.yaml');
writeFileSync(
  rulesFile,
  `domain: quota
tenant_key: tenant
descriptors:
  - key: tenant
    rate_limit: {unit: second, requests_per_unit: 40, algorithm: fixed_window}
`,
);
const rules = loadRules(rulesFile, { defaultAlgorithm: 'fixed_window' });
const CALL_TIMEOUT_MS = 400;

let server: GrpcServer;
let rlqs: RlqsService;
let address: string;
/** The bounds the service refused something by, in order. */
const refused: string[] = [];

beforeAll(async () => {
  const store = createMemoryStore();
  const demand = createMemoryDemand({ maxConsumers: 100 });
  rlqs = createRlqsService({
    session: (streamId) =>
      createSession({
        streamId,
        rules: () => rules,
        store,
        demand,
        plan: {
          keyPrefix: '',
          defaultAlgorithm: 'fixed_window',
          counting: ownCounting,
          quota: ruleQuota,
        },
        clock: undefined,
        unmatched: 'allow',
        ttlFloorMs: 2000,
        maxBuckets: 3,
      }),
    maxStreams: 2,
    maxBucketsPerStream: 3,
    maxReportsPerSecond: 20,
    maxBucketReportsPerSecond: 1_000,
    staleMs: 60_000,
    maxQueuedBytes: 1 << 20,
    maxQueuedBytesTotal: 8 << 20,
    unreadMs: 60_000,
    onEvent: (event) => {
      if (event.kind === 'refused') refused.push(event.reason);
    },
  });
  server = createGrpcServer({
    decide: () => Promise.reject(new Error('no classic checks here')),
    limits: { maxDescriptors: 64, maxEntries: 16, maxEntryBytes: 1024 },
    rlqs: rlqs.handler,
    guard: {
      maxConnections: 100,
      maxCalls: 100,
      maxReceivingBytes: 1 << 20,
      callTimeoutMs: CALL_TIMEOUT_MS,
      maxHeaderListBytes: 16384,
      maxConnectionAgeMs: Infinity,
      maxConnectionAgeGraceMs: 1000,
      maxConnectionIdleMs: Infinity,
    },
  });
  address = `127.0.0.1:${await server.listen('127.0.0.1', 0)}`;
});

afterAll(async () => {
  await server?.shutdown(500);
  rmSync(dir, { recursive: true });
});

const open = () => openRlqs(address);
const encodeReport = (packageDefinition[rlqsServiceName] as protoLoader.ServiceDefinition)
  .StreamRateLimitQuotas!.requestSerialize;
const report = (bucket: Record<string, string>, allowed: number, domain?: string) =>
  usageReport(bucket, allowed, domain);

describe('StreamRateLimitQuotas', () => {
  it('answers each report with a token bucket of the rule, past the call timeout', async () => {
    const { stream, next, close } = open();
    try {
      stream.write(report({ tenant: 'acme' }, 1, 'quota'));
      const first = await next();
      expect(first).toMatchObject({
        bucket_action: [
          {
            bucket_id: { bucket: { tenant: 'acme' } },
            quota_assignment_action: {
              assignment_time_to_live: { seconds: '3' },
              rate_limit_strategy: {
                token_bucket: {
                  // Half a second of the rate: what a new bucket starts with.
                  max_tokens: 20,
                  tokens_per_fill: { value: 40 },
                  fill_interval: { seconds: '1' },
                },
              },
            },
          },
        ],
      });
      await new Promise((resolve) => setTimeout(resolve, CALL_TIMEOUT_MS * 2));
      stream.write(report({ tenant: 'acme' }, 5));
      expect((await next()).bucket_action).toEqual(first.bucket_action);
    } finally {
      close();
    }
  });

  it('ends a stream whose first report has no domain with INVALID_ARGUMENT', async () => {
    const { stream, ended, close } = open();
    stream.write(report({ tenant: 'acme' }, 1));
    const status = await ended;
    close();
    expect(status.code).toBe(grpc.status.INVALID_ARGUMENT);
    expect(status.details).toBe('the first report has no domain');
  });

  it('refuses a report of more buckets than a stream holds, and a bucket of too many entries', async () => {
    const usage = (bucket: Record<string, string>) => ({
      bucket_id: { bucket },
      time_elapsed: { seconds: 1 },
      num_requests_allowed: 1,
    });
    const wide = open();
    wide.stream.write({
      domain: 'quota',
      bucket_quota_usages: ['a', 'b', 'c', 'd'].map((tenant) => usage({ tenant })),
    });
    const tooMany = await wide.ended;
    wide.close();
    expect(tooMany.code).toBe(grpc.status.RESOURCE_EXHAUSTED);
    expect(tooMany.details).toBe(
      'a report of 4 buckets: this stream may hold 3 buckets, RLQS_MAX_BUCKETS_PER_STREAM',
    );
    const deep = open();
    const entries = Object.fromEntries(Array.from({ length: 65 }, (_, n) => [`k${n}`, 'v']));
    deep.stream.write({ domain: 'quota', bucket_quota_usages: [usage(entries)] });
    const tooDeep = await deep.ended;
    deep.close();
    expect(tooDeep.code).toBe(grpc.status.INVALID_ARGUMENT);
    expect(tooDeep.details).toBe('bucket_quota_usages[0].bucket_id has more than 64 entries');
  });

  it('refuses a bucket past the per-stream bound, and a stream past the stream bound', async () => {
    const one = open();
    const two = open();
    const three = open();
    try {
      one.stream.write(report({ tenant: 'a' }, 1, 'quota'));
      await one.next();
      two.stream.write(report({ tenant: 'a' }, 1, 'quota'));
      await two.next();
      three.stream.write(report({ tenant: 'a' }, 1, 'quota'));
      expect((await three.ended).code).toBe(grpc.status.RESOURCE_EXHAUSTED);
      for (const tenant of ['b', 'c', 'd']) one.stream.write(report({ tenant }, 1));
      const status = await one.ended;
      expect(status.code).toBe(grpc.status.RESOURCE_EXHAUSTED);
      expect(status.details).toMatch(/3 buckets, RLQS_MAX_BUCKETS_PER_STREAM/);
    } finally {
      for (const s of [one, two, three]) s.close();
    }
  });

  it('ends a stream whose client stops reading once RLQS_MAX_QUEUED_BYTES wait, naming it', async () => {
    // A raw HTTP/2 client whose streams have no window: the answers wait in the server.
    const session = http2.connect(`http://${address}`, { settings: { initialWindowSize: 0 } });
    session.on('error', () => undefined);
    try {
      const stream = session.request(
        {
          ':method': 'POST',
          ':path': RLQS_STREAM_PATH,
          'content-type': 'application/grpc',
          te: 'trailers',
        },
        { endStream: false },
      );
      stream.on('error', () => undefined);
      const trailers = new Promise<http2.IncomingHttpHeaders>((resolve) =>
        stream.once('trailers', resolve),
      );
      stream.resume();
      // Buckets of 63 entries of 1,000 bytes: each report of 3 is answered with about 190 KB.
      const wide = Object.fromEntries(
        Array.from({ length: 63 }, (_, n) => [`key${n}`.padEnd(8, '_'), 'v'.repeat(992)]),
      );
      const usages = ['a', 'b', 'c'].map((tenant) => ({
        bucket_id: { bucket: { ...wide, tenant } },
        time_elapsed: { seconds: 1 },
        num_requests_allowed: 1,
      }));
      const frame = grpcFrame(encodeReport({ domain: 'quota', bucket_quota_usages: usages }));
      for (let n = 0; n < 12; n++) stream.write(frame);
      for (let n = 0; n < 300 && !refused.includes('queued_bytes'); n++) await sleep(10);
      expect(refused).toContain('queued_bytes');
      // A client that reads again within a second gets the answers queued, then the status.
      session.settings({ initialWindowSize: 1 << 24 });
      expect(await trailers).toMatchObject({
        'grpc-status': String(grpc.status.RESOURCE_EXHAUSTED),
        'grpc-message': encodeURI(
          'more than 1048576 bytes of answers wait for the client to read them, RLQS_MAX_QUEUED_BYTES',
        ),
      });
    } finally {
      session.destroy();
    }
  });

  it('counts the answers that silent streams queue in RLQS_MAX_QUEUED_BYTES_TOTAL until they close', async () => {
    const session = http2.connect(`http://${address}`, { settings: { initialWindowSize: 0 } });
    session.on('error', () => undefined);
    const wide = Object.fromEntries(
      Array.from({ length: 63 }, (_, n) => [`key${n}`.padEnd(8, '_'), 'v'.repeat(992)]),
    );
    const usages = ['a', 'b', 'c'].map((tenant) => ({
      bucket_id: { bucket: { ...wide, tenant } },
      time_elapsed: { seconds: 1 },
      num_requests_allowed: 1,
    }));
    const frame = grpcFrame(encodeReport({ domain: 'quota', bucket_quota_usages: usages }));
    // 2 streams (the bound here) of 4 reports, each answered with about 190 KB: under 1 MiB a
    // stream, and 8 MiB in all.
    for (let s = 0; s < 2; s++) {
      const stream = session.request(
        {
          ':method': 'POST',
          ':path': RLQS_STREAM_PATH,
          'content-type': 'application/grpc',
          te: 'trailers',
        },
        { endStream: false },
      );
      stream.on('error', () => undefined);
      for (let n = 0; n < 4; n++) stream.write(frame);
    }
    const queued = 2 * 4 * 190_749;
    for (let n = 0; n < 300 && rlqs.queuedBytes() < queued; n++) await sleep(10);
    expect(rlqs.queuedBytes()).toBe(queued);
    session.destroy();
    for (let n = 0; n < 300 && rlqs.queuedBytes() > 0; n++) await sleep(10);
    expect(rlqs.queuedBytes()).toBe(0);
    expect(rlqs.streams()).toBe(0);
  });

  it('has health of its own name', async () => {
    expect(await rlqsHealth(address)).toBe('SERVING');
  });
});
