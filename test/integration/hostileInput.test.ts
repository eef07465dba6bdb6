import { execFile } from 'node:child_process';
import { mkdtempSync, readFileSync, renameSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import * as grpc from '@grpc/grpc-js';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { RulesError } from '../../src/core/errors.js';
import { loadProtoRoot, shouldRateLimitMethod } from '../../src/core/protos.js';
import { type RateLimitRequestObject, type RateLimitResponseObject } from '@tollgate/client';
import { createLimiter } from '../../src/decision/limiter.js';
import { loadRules } from '../../src/rules/loadRules.js';
import { readSettings } from '../../src/process/settings.js';
import { createMemoryStore } from '../../src/store/memoryStore.js';
import { createRedisStore } from '../../src/store/redisStore.js';
import { spawnTollgate, type TollgateProcess } from '../support/processes.js';
import { freePort } from '../support/ports.js';
import { startRedis, type TestRedis } from '../support/redis.js';
import { callCheck, d, eventually, manualClock, writeRules } from '../support/tollgate.js';

// The brief's bad input, sent by a caller who means harm: each gets INVALID_ARGUMENT, a rules
// error that names the fault, or the decision README documents, and the service keeps serving
// everyone else throughout. Requests go to a tollgate process on a real Redis while a bystander
// tenant keeps calling; rules files go to the loader in a child process with a heap cap, timed
// and measured; key floods go through the limiter into both stores.

const RULES = `
domain: hostile
descriptors:
  - key: tenant
    rate_limit: {unit: hour, requests_per_unit: 100}
  - key: bucket
    rate_limit: {unit: hour, requests_per_unit: 100, algorithm: token_bucket}
  - key: fixed
    rate_limit: {unit: hour, requests_per_unit: 100, algorithm: fixed_window}
  - key: widest
    rate_limit: {unit: hour, requests_per_unit: 4294967295}
  - key: closed
    rate_limit: {unit: hour, requests_per_unit: 0}
  - key: bystander
    rate_limit: {unit: hour, requests_per_unit: 4000000000}
`;
const UINT32_MAX = 4294967295;
const UINT64_MAX = '18446744073709551615';

let redis: TestRedis;
let tollgate: TollgateProcess;
let httpUrl: string;
let rulesPath: string;
const scratch = mkdtempSync(join(tmpdir(), 'tollgate-hostile-'));

beforeAll(async () => {
  redis = await startRedis();
  const httpPort = await freePort();
  httpUrl = `http://127.0.0.1:${httpPort}`;
  rulesPath = writeRules(RULES);
  tollgate = await spawnTollgate(RULES, {
    REDIS_URL: redis.url,
    REDIS_TIMEOUT: '1s',
    PORT: String(httpPort),
    CONFIG_PATH: rulesPath,
    CONFIG_POLL_INTERVAL: '200ms',
  });
}, 60_000);

afterAll(async () => {
  const exit = await tollgate?.stop();
  await redis?.stop();
  rmSync(scratch, { recursive: true, force: true });
  expect(exit).toBe(0);
});

const check = (request: RateLimitRequestObject, deadlineMs = 10_000) =>
  callCheck(tollgate.client, request, deadlineMs);

async function rejection(call: Promise<unknown>): Promise<{ code: string; details: string }> {
  const error = await call.then(
    (response) => expect.unreachable(`answered ${JSON.stringify(response).slice(0, 300)}`),
    (e: grpc.ServiceError) => e,
  );
  return { code: grpc.status[error.code], details: error.details };
}

let normalCalls = 0;
/** After every hostile input: the process runs, and another tenant is served as usual. */
async function expectStillServing(): Promise<void> {
  expect(tollgate.child.exitCode, tollgate.stderr()).toBeNull();
  expect(tollgate.child.signalCode, tollgate.stderr()).toBeNull();
  normalCalls += 1;
  const response = await check({ domain: 'hostile', descriptors: [d('tenant', 'innocent')] });
  expect(response.overall_code).toBe('OK');
  expect(response.statuses?.[0]?.limit_remaining).toBe(100 - normalCalls);
}

// Requests as bytes, so that they can carry what the string client cannot: invalid UTF-8, and
// bytes that are not a RateLimitRequest at all.
const BytesRequest = loadProtoRoot('bytes').lookupType(
  'envoy.service.ratelimit.v3.RateLimitRequest',
);
type RawClient = grpc.Client & {
  ShouldRateLimit(
    request: Buffer,
    metadata: grpc.Metadata,
    options: grpc.CallOptions,
    callback: (error: grpc.ServiceError | null, response?: RateLimitResponseObject) => void,
  ): void;
};
const RawClientConstructor = grpc.makeGenericClientConstructor(
  { ShouldRateLimit: { ...shouldRateLimitMethod, requestSerialize: (bytes: Buffer) => bytes } },
  'RateLimitService',
);
function sendRaw(bytes: Buffer): Promise<RateLimitResponseObject> {
  const raw = new RawClientConstructor(
    tollgate.address,
    grpc.credentials.createInsecure(),
  ) as unknown as RawClient;
  return new Promise<RateLimitResponseObject>((done, fail) =>
    raw.ShouldRateLimit(bytes, new grpc.Metadata(), { deadline: Date.now() + 10_000 }, (e, r) =>
      e ? fail(e) : done(r!),
    ),
  ).finally(() => raw.close());
}
const rawRequest = (domain: Buffer, key: Buffer, value: Buffer) =>
  Buffer.from(
    BytesRequest.encode({ domain, descriptors: [{ entries: [{ key, value }] }] }).finish(),
  );

describe('hostile requests, while a bystander keeps calling', () => {
  // Another tenant calls every 10 ms for the whole block; every one of its calls must pass.
  const bystander = { calls: 0, failures: [] as string[], maxLatencyMs: 0 };
  let stopBystander: () => Promise<void>;
  beforeAll(() => {
    let stopped = false;
    const loop = (async () => {
      // Bounded: at most 3,000 calls (30 s at one per 10 ms).
      for (let i = 0; !stopped && i < 3_000; i++) {
        const started = performance.now();
        try {
          const response = await check({ domain: 'hostile', descriptors: [d('bystander', 'b')] });
          if (response.overall_code !== 'OK') bystander.failures.push(response.overall_code!);
        } catch (error) {
          bystander.failures.push((error as grpc.ServiceError).message);
        }
        bystander.calls += 1;
        bystander.maxLatencyMs = Math.max(bystander.maxLatencyMs, performance.now() - started);
        await new Promise((r) => setTimeout(r, 10));
      }
    })();
    stopBystander = async () => {
      stopped = true;
      await loop;
    };
  });
  afterAll(async () => {
    await stopBystander();
    console.log(
      `[hostile] bystander: ${bystander.calls} calls, ${bystander.failures.length} not OK, ` +
        `max latency ${bystander.maxLatencyMs.toFixed(1)} ms`,
    );
    expect(bystander.failures).toEqual([]);
    // How many depends on how long the hostile requests took; it called throughout them.
    expect(bystander.calls).toBeGreaterThanOrEqual(5);
    expect(bystander.maxLatencyMs).toBeLessThan(1_000);
  });

  const one = [d('tenant', 'x')];
  it.each([
    {
      input: 'an empty domain',
      request: { domain: '', descriptors: one },
      details: 'domain is empty',
    },
    {
      input: 'a 1 MB domain',
      request: { domain: 'd'.repeat(1_000_000), descriptors: one },
      details: 'domain is 1000000 bytes, over MAX_ENTRY_BYTES (1024)',
    },
    {
      input: '10,000 descriptors',
      request: { domain: 'hostile', descriptors: Array(10_000).fill(one[0]) },
      details: '10000 descriptors exceed MAX_DESCRIPTORS (64)',
    },
    {
      input: 'a 1 MB key',
      request: { domain: 'hostile', descriptors: [d('k'.repeat(1_000_000), 'v')] },
      details: 'descriptors[0].entries[0].key is 1000000 bytes, over MAX_ENTRY_BYTES (1024)',
    },
    {
      input: 'a 1 MB value',
      request: { domain: 'hostile', descriptors: [d('tenant', 'v'.repeat(1_000_000))] },
      details: 'descriptors[0].entries[0].value is 1000000 bytes, over MAX_ENTRY_BYTES (1024)',
    },
    {
      input: '1,000 entries in one descriptor',
      request: { domain: 'hostile', descriptors: [d(...Array(2_000).fill('k'))] },
      details: 'descriptors[0] has 1000 entries, over MAX_ENTRIES (16)',
    },
  ])('answers INVALID_ARGUMENT to $input', async ({ request, details }) => {
    const started = performance.now();
    expect(await rejection(check(request))).toEqual({ code: 'INVALID_ARGUMENT', details });
    console.log(`[hostile] ${details}: ${(performance.now() - started).toFixed(1)} ms`);
    await expectStillServing();
  });

  it.each([
    { where: 'a key', key: Buffer.from([0x6b, 0xff]), value: Buffer.from('v'), at: 'key' },
    { where: 'a value', key: Buffer.from('tenant'), value: Buffer.from([0xc3, 0x28]), at: 'value' },
    {
      where: 'a value (an encoded surrogate)',
      key: Buffer.from('tenant'),
      value: Buffer.from([0xed, 0xa0, 0x80]),
      at: 'value',
    },
  ])('answers INVALID_ARGUMENT to invalid UTF-8 in $where', async ({ key, value, at }) => {
    expect(await rejection(sendRaw(rawRequest(Buffer.from('hostile'), key, value)))).toEqual({
      code: 'INVALID_ARGUMENT',
      details: `descriptors[0].entries[0].${at} is not valid UTF-8`,
    });
    await expectStillServing();
  });

  it('answers INVALID_ARGUMENT to bytes that are not a request', async () => {
    const noise = Buffer.from(Array.from({ length: 4_096 }, (_, i) => (i * 7919 + 13) % 256));
    const { code, details } = await rejection(sendRaw(noise));
    expect(code).toBe('INVALID_ARGUMENT');
    expect(details).toMatch(/^malformed request: /);
    await expectStillServing();
  });

  it('refuses an 8 MB message at the transport, before decoding it, and stays up', async () => {
    // Past grpc-js's 4 MB receive limit the message never reaches tollgate's decoder.
    const huge = { domain: 'hostile', descriptors: [d('tenant', 'v'.repeat(8_000_000))] };
    const { code, details } = await rejection(check(huge));
    console.log(`[hostile] an 8 MB request: ${code}: ${details}`);
    expect(code).toBe('RESOURCE_EXHAUSTED');
    await expectStillServing();
  });

  describe('hits_addend at the integer maxima', () => {
    const remaining = async (key: string, value: string) =>
      (
        await check({
          domain: 'hostile',
          descriptors: [{ ...d(key, value), hits_addend: { value: 0 } }],
        })
      ).statuses?.[0]?.limit_remaining;

    it.each(['tenant', 'bucket', 'fixed'])(
      'a %s limit of 100: OVER_LIMIT with no reset and nothing consumed, at 2^32-1 and 2^64-1',
      async (key) => {
        const value = `max-${key}`;
        const requests: RateLimitRequestObject[] = [
          { domain: 'hostile', hits_addend: UINT32_MAX, descriptors: [d(key, value)] },
          {
            domain: 'hostile',
            descriptors: [{ ...d(key, value), hits_addend: { value: UINT64_MAX } }],
          },
          {
            domain: 'hostile',
            hits_addend: UINT32_MAX,
            descriptors: [{ ...d(key, value), hits_addend: { value: UINT64_MAX } }],
          },
        ];
        for (const request of requests) {
          const response = await check(request);
          expect(response.overall_code).toBe('OVER_LIMIT');
          expect(response.statuses?.[0]?.code).toBe('OVER_LIMIT');
          expect(response.statuses?.[0]?.duration_until_reset).toBeUndefined();
          expect(response.statuses?.[0]?.limit_remaining).toBe(100);
          const headers = (response.response_headers_to_add ?? []).map((h) => h.key);
          expect(headers).not.toContain('Retry-After');
        }
        expect(await remaining(key, value)).toBe(100);
        await expectStillServing();
      },
    );

    it('a limit of 2^32-1: a cost of 2^32-1 fits exactly, then nothing more does', async () => {
      const first = await check({
        domain: 'hostile',
        hits_addend: UINT32_MAX,
        descriptors: [d('widest', 'w')],
      });
      expect(first.overall_code).toBe('OK');
      expect(first.statuses?.[0]?.limit_remaining).toBe(0);
      const next = await check({ domain: 'hostile', descriptors: [d('widest', 'w')] });
      expect(next.overall_code).toBe('OVER_LIMIT');
      expect(next.statuses?.[0]?.duration_until_reset).toBeDefined();
      const uint64 = await check({
        domain: 'hostile',
        descriptors: [{ ...d('widest', 'w2'), hits_addend: { value: UINT64_MAX } }],
      });
      expect(uint64.overall_code).toBe('OVER_LIMIT');
      expect(uint64.statuses?.[0]?.duration_until_reset).toBeUndefined();
      // Nothing counted, all 2^32-1 left: reported one less, since 2^32-1 means unlimited.
      expect(uint64.statuses?.[0]?.limit_remaining).toBe(UINT32_MAX - 1);
      await expectStillServing();
    });
  });

  it('a limit of 0 denies every request, even a check-only one, with no reset', async () => {
    for (const request of [
      { domain: 'hostile', descriptors: [d('closed', 'c')] },
      { domain: 'hostile', descriptors: [{ ...d('closed', 'c'), hits_addend: { value: 0 } }] },
    ]) {
      const response = await check(request);
      expect(response.overall_code).toBe('OVER_LIMIT');
      expect(response.statuses?.[0]).toMatchObject({
        code: 'OVER_LIMIT',
        current_limit: { requests_per_unit: 0, unit: 'HOUR' },
        limit_remaining: 0,
      });
      expect(response.statuses?.[0]?.duration_until_reset).toBeUndefined();
    }
    await expectStillServing();
  });

  it('64 descriptors of 16 entries of 1 KB keys and values (the bounds) are decided, once, in bounded memory', async () => {
    // The largest request within the defaults: about 2 MB. With a limit override every
    // descriptor becomes a counter; its 32 KB of entries are hashed into a key of about 100 bytes.
    const big = (i: number, j: number) => `${i}-${j}-`.padEnd(1024, 'x');
    const request = {
      domain: 'hostile',
      descriptors: Array.from({ length: 64 }, (_, i) => ({
        entries: Array.from({ length: 16 }, (_, j) => ({ key: big(i, j), value: big(j, i) })),
        limit: { requests_per_unit: 1, unit: 'YEAR' },
      })),
    };
    const usedMemory = async () =>
      Number(/^used_memory:(\d+)/m.exec(await redis.client.info('memory'))?.[1]);
    const before = await usedMemory();
    const started = performance.now();
    const response = await check(request);
    const ms = performance.now() - started;
    expect(response.overall_code).toBe('OK');
    expect(response.statuses).toHaveLength(64);
    const again = await check(request);
    expect(again.overall_code).toBe('OVER_LIMIT');
    const after = await usedMemory();
    const keys = (await redis.client.keys('tg:{#*')).filter((key) =>
      key.endsWith('|sw:31536000000'),
    );
    const sizes = await Promise.all(keys.map((key) => redis.client.memory('USAGE', key)));
    const ttls = await Promise.all(keys.map((key) => redis.client.pttl(key)));
    console.log(
      `[hostile] 64×16 entries of 1 KB with a YEAR override: decided in ${ms.toFixed(0)} ms; ` +
        `${keys.length} keys of ${Math.max(...keys.map((k) => k.length))} bytes at most, ` +
        `MEMORY USAGE ${Math.max(...sizes.map(Number))} bytes a key at most, ` +
        `Redis grew ${((after - before) / 1e3).toFixed(1)} KB, ` +
        `TTL up to ${(Math.max(...ttls) / 86_400_000).toFixed(0)} days`,
    );
    expect(keys).toHaveLength(64);
    for (const key of keys) expect(Buffer.byteLength(key)).toBeLessThanOrEqual(260);
    // README's bound: at most MAX_DESCRIPTORS counters a request, each at most 512 bytes in Redis.
    for (const size of sizes) expect(Number(size)).toBeLessThanOrEqual(512);
    // Each key expires, at most two windows (two years) from now; LIMIT_OVERRIDES_ENABLED=false
    // refuses such requests altogether (below).
    for (const ttl of ttls) {
      expect(ttl).toBeGreaterThan(0);
      expect(ttl).toBeLessThanOrEqual(2 * 365 * 86_400_000);
    }
    await expectStillServing();
  });

  it('a limit override, with LIMIT_OVERRIDES_ENABLED=false, is INVALID_ARGUMENT naming it', async () => {
    const strict = await spawnTollgate(RULES, {
      REDIS_URL: redis.url,
      LIMIT_OVERRIDES_ENABLED: 'false',
    });
    try {
      const override = {
        domain: 'hostile',
        descriptors: [
          d('tenant', 'plain'),
          { ...d('tenant', 'own'), limit: { requests_per_unit: 5, unit: 'YEAR' } },
        ],
      };
      expect(await rejection(callCheck(strict.client, override))).toEqual({
        code: 'INVALID_ARGUMENT',
        details:
          'descriptors[1].limit: limit overrides are refused (LIMIT_OVERRIDES_ENABLED=false)',
      });
      expect(await redis.client.keys('tg:{*own*')).toEqual([]);
      const plain = await callCheck(strict.client, {
        domain: 'hostile',
        descriptors: [d('tenant', 'plain')],
      });
      expect(plain.overall_code).toBe('OK');
    } finally {
      await strict.stop();
    }
  });
});

describe('limits in the rules file', () => {
  const dir = mkdtempSync(join(scratch, 'limits-'));
  const load = (name: string, rateLimit: string) => {
    const path = join(dir, `${name}.yaml`);
    writeFileSync(path, `domain: d\ndescriptors:\n  - key: k\n    rate_limit: ${rateLimit}\n`);
    return () => loadRules(path, { defaultAlgorithm: 'sliding_window' });
  };
  const rpu = 'descriptors[0].rate_limit.requests_per_unit';

  it.each([
    {
      what: 'a negative limit',
      file: 'negative',
      rateLimit: '{unit: second, requests_per_unit: -1}',
      message: `${rpu}: must be between 0 and 4294967295, got -1`,
    },
    {
      what: 'a fractional limit',
      file: 'fractional',
      rateLimit: '{unit: second, requests_per_unit: 1.5}',
      message: `${rpu}: must be an integer, got '1.5'`,
    },
    {
      what: 'a limit of 2^32',
      file: 'uint32-overflow',
      rateLimit: '{unit: second, requests_per_unit: 4294967296}',
      message: `${rpu}: must be between 0 and 4294967295, got 4294967296`,
    },
    {
      what: 'a limit past 2^64',
      file: 'uint64-overflow',
      rateLimit: '{unit: second, requests_per_unit: 99999999999999999999999}',
      message: `${rpu}: must be between 0 and 4294967295, got 99999999999999999999999`,
    },
    {
      what: 'a limit in exponent form',
      file: 'exponent',
      rateLimit: '{unit: second, requests_per_unit: 1.0e+3}',
      message: `${rpu}: must be an integer, got '1.0e+3'`,
    },
    {
      what: 'an infinite limit',
      file: 'infinite',
      rateLimit: '{unit: second, requests_per_unit: .inf}',
      message: `${rpu}: must be an integer, got '.inf'`,
    },
    {
      what: 'a quoted limit',
      file: 'quoted',
      rateLimit: `{unit: second, requests_per_unit: '10'}`,
      message: `${rpu}: must be an integer, got '10' (quoted, so a string)`,
    },
    {
      what: 'a burst of 2^32',
      file: 'burst-overflow',
      rateLimit: '{unit: second, requests_per_unit: 1, algorithm: token_bucket, burst: 4294967296}',
      message: 'descriptors[0].rate_limit.burst: must be between 1 and 4294967295, got 4294967296',
    },
    {
      what: 'a negative window',
      file: 'negative-window',
      rateLimit: "{window: '-5s', requests_per_unit: 1}",
      message: "descriptors[0].rate_limit.window: invalid duration '-5s': must not be negative",
    },
    {
      what: 'an overflowing window',
      file: 'window-overflow',
      rateLimit: "{window: '9999999999999999999h', requests_per_unit: 1}",
      message:
        "descriptors[0].rate_limit.window: invalid duration '9999999999999999999h': out of range",
    },
  ])('refuses $what, naming the file, the path and the key', ({ file, rateLimit, message }) => {
    const loading = load(file, rateLimit);
    expect(loading).toThrow(RulesError);
    expect(loading).toThrow(`${file}.yaml: ${message}`);
  });

  it('accepts 0, which denies everything (decided above)', () => {
    const rules = load('zero', '{unit: second, requests_per_unit: 0}')();
    expect(rules.domains.get('d')).toBeDefined();
  });
});

describe('rules files that try to exhaust the loader', () => {
  /**
   * Loads a rules file in its own process, heap capped at 1 GB and killed after `killAfterMs`,
   * so that a loader that hangs or blows up fails this test instead of taking the run down. The
   * time it reports is the CPU time the load took (user and system, all the process's threads),
   * which a busy machine does not stretch as it stretches the wall clock.
   */
  function loadInChild(path: string, killAfterMs: number) {
    const loader = resolve('dist/rules/loadRules.js');
    const script = `
      const { loadRules } = await import(${JSON.stringify(loader)});
      const rss = process.memoryUsage().rss;
      const started = performance.now();
      const cpu = process.cpuUsage();
      let outcome;
      try {
        const rules = loadRules(process.argv[1], { defaultAlgorithm: 'sliding_window' });
        outcome = { loaded: [...rules.domains.keys()] };
      } catch (error) {
        outcome = { error: error.name, message: String(error.message).slice(0, 300) };
      }
      const used = process.cpuUsage(cpu);
      const ms = (used.user + used.system) / 1000;
      const wallMs = performance.now() - started;
      const peakMb = (process.resourceUsage().maxRSS * 1024 - rss) / 1e6;
      console.log(JSON.stringify({ ...outcome, ms, wallMs, peakMb }));`;
    return new Promise<{
      ms: number;
      wallMs?: number;
      peakMb: number;
      loaded?: string[];
      error?: string;
      message?: string;
      killed?: string;
    }>((done) => {
      const started = performance.now();
      // A killed child reports nothing: its high-water RSS is read from /proc meanwhile.
      let highWaterMb = NaN;
      const child = execFile(
        process.execPath,
        ['--max-old-space-size=1024', '--input-type=module', '-e', script, path],
        { timeout: killAfterMs, killSignal: 'SIGKILL', maxBuffer: 1 << 20 },
        (error, stdout, stderr) => {
          clearInterval(sampler);
          const line = stdout.trim().split('\n').at(-1) ?? '';
          if (line.startsWith('{')) return done(JSON.parse(line));
          const ms = performance.now() - started;
          const why = error?.killed
            ? `killed after ${ms.toFixed(0)} ms, its RSS at ${highWaterMb.toFixed(0)} MB`
            : `exited ${error?.code ?? ''} ${error?.signal ?? ''}: ${stderr.split('\n').find((l) => /heap|memory|Error/.test(l)) ?? stderr.slice(-300)}`;
          done({ ms, peakMb: highWaterMb, killed: why });
        },
      );
      const sampler = setInterval(() => {
        try {
          const status = readFileSync(`/proc/${child.pid}/status`, 'utf8');
          const kb = Number(/^VmHWM:\s+(\d+)/m.exec(status)?.[1]);
          if (kb > 0) highWaterMb = kb / 1024;
        } catch {
          // Gone, or not Linux.
        }
      }, 100);
    });
  }

  interface Case {
    input: string;
    file: () => string;
    maxMs: number;
    maxMb: number;
    /** What the loader must answer: a RulesError with this message, or the rules loaded. */
    expected: RegExp | 'loads';
  }

  const write = (name: string, text: string) => {
    const path = join(scratch, name);
    writeFileSync(path, text);
    return path;
  };

  /** Block-style rules, a tenant with a nested route per block, up to `bytes` of YAML. */
  function bigRules(bytes: number): string {
    const parts = ['domain: big', 'descriptors:'];
    let size = 0;
    for (let i = 0; size < bytes; i++) {
      const block =
        `  - key: tenant\n    value: t${i}\n    rate_limit: {unit: minute, requests_per_unit: ${i % 1000}}\n` +
        `    descriptors:\n      - key: route\n        value: /r${i}\n        rate_limit: {unit: second, requests_per_unit: 10}\n`;
      parts.push(block.trimEnd());
      size += block.length;
    }
    return `${parts.join('\n')}\n`;
  }

  /** The billion laughs: ten aliases of ten aliases of ... `levels` deep, inside `metadata`. */
  function laughs(levels: number): string {
    const lines = [
      'domain: laughs',
      'descriptors:',
      '  - key: k',
      '    rate_limit: {unit: second, requests_per_unit: 1}',
      '    metadata:',
      `      l0: &l0 [${Array(10).fill('"lol"').join(', ')}]`,
    ];
    for (let i = 1; i < levels; i++) {
      lines.push(
        `      l${i}: &l${i} [${Array(10)
          .fill(`*l${i - 1}`)
          .join(', ')}]`,
      );
    }
    return `${lines.join('\n')}\n`;
  }

  /**
   * The same in the rules tree: each level holds an `a` and a `b` rule whose children are the
   * level below's `a` and `b`, by alias. The file grows by a line per level, the tree doubles.
   */
  function aliasTree(levels: number): string {
    const leaf = (key: string) =>
      `&${key}0 {key: ${key}, rate_limit: {unit: second, requests_per_unit: 1}}`;
    const b = (k: number): string =>
      k === 0 ? leaf('b') : `&b${k} {key: b, descriptors: [*a${k - 1}, *b${k - 1}]}`;
    const a = (k: number): string =>
      k === 0 ? leaf('a') : `&a${k} {key: a, descriptors: [${a(k - 1)}, ${b(k - 1)}]}`;
    return `domain: tree\ndescriptors: [${a(levels)}, ${b(levels)}]\n`;
  }

  const cases: Case[] = [
    {
      input: 'flow mappings nested 50,000 deep (250 KB)',
      file: () => write('flow.yaml', `domain: ${'{a: '.repeat(50_000)}1${'}'.repeat(50_000)}\n`),
      // About 1.7 s of CPU on a quiet machine, the parser's recursion running out of stack.
      maxMs: 5_000,
      maxMb: 256,
      expected: /^flow\.yaml: invalid YAML at line 1, column \d+: /,
    },
    {
      input: 'descriptors nested 5,000 deep',
      file: () =>
        write(
          'deep.yaml',
          `domain: deep\ndescriptors: ${'[{key: k, descriptors: '.repeat(5_000)}[]${'}]'.repeat(5_000)}\n`,
        ),
      maxMs: 3_000,
      maxMb: 256,
      expected: /^deep\.yaml: invalid YAML at line 2, column \d+: /,
    },
    {
      input: 'descriptors nested 200 deep',
      file: () =>
        write(
          'deep200.yaml',
          `domain: deep\ndescriptors: ${'[{key: k, rate_limit: {unit: second, requests_per_unit: 1}, descriptors: '.repeat(200)}[]${'}]'.repeat(200)}\n`,
        ),
      maxMs: 3_000,
      maxMb: 256,
      expected: 'loads',
    },
    {
      input: 'a YAML syntax error',
      file: () => write('broken.yaml', 'domain: x\ndescriptors:\n  - key: [unclosed\n'),
      maxMs: 3_000,
      maxMb: 128,
      expected: /^broken\.yaml: invalid YAML at line \d+, column \d+: /,
    },
  ];
  // Each of these is a bug while it fails: the loader neither refuses nor bounds the input.
  const bombs: Case[] = [
    {
      input: 'a 20 MB file of nested descriptors',
      file: () => write('big.yaml', bigRules(20 * 1024 * 1024)),
      maxMs: 10_000,
      maxMb: 512,
      expected: /^big\.yaml: |loads/,
    },
    {
      input: 'a billion laughs: 10^9 strings by alias in metadata (500 bytes)',
      file: () => write('laughs.yaml', laughs(9)),
      maxMs: 2_000,
      maxMb: 128,
      expected: /^laughs\.yaml: /,
    },
    {
      input: 'an alias tree: 2^30 rules by alias in descriptors (2 KB)',
      file: () => write('tree.yaml', aliasTree(30)),
      maxMs: 2_000,
      maxMb: 128,
      expected: /^tree\.yaml: /,
    },
  ];

  async function expectBounded({ input, file, maxMs, maxMb, expected }: Case): Promise<void> {
    const path = file();
    // The wall clock only catches a hang: on a busy machine, starting the child alone can take
    // seconds. The bound is on the CPU time of the load.
    const result = await loadInChild(path, 10 * maxMs + 10_000);
    const answer = result.loaded
      ? `loaded ${result.loaded.join(', ')}`
      : result.error
        ? `${result.error}: ${result.message}`
        : result.killed;
    const cost = result.killed
      ? ''
      : `; ${result.ms.toFixed(0)} ms of CPU (${result.wallMs?.toFixed(0)} ms), peak RSS +${result.peakMb.toFixed(0)} MB`;
    console.log(
      `[hostile] rules file with ${input}: ${answer}${cost} (bounds: ${maxMs} ms, ${maxMb} MB)`,
    );
    expect(result.killed, `the loader neither refused nor bounded ${input}`).toBeUndefined();
    expect(result.ms).toBeLessThan(maxMs);
    expect(result.peakMb).toBeLessThan(maxMb);
    if (expected === 'loads') expect(result.loaded).toBeDefined();
    else if (result.error !== undefined) {
      expect(result.error).toBe('RulesError');
      expect(result.message).toMatch(expected);
    } else expect(String(expected)).toContain('loads');
  }

  it.each(cases)('refuses or loads $input in bounded time and memory', expectBounded);
  // One at a time: each may spin a core until it is killed, beside the other test files.
  it.each(bombs)('refuses or bounds $input', expectBounded, 20_000);

  it('keeps the previous rules in force when a reload is malformed, and keeps serving', async () => {
    const limitOf = async () =>
      (await check({ domain: 'hostile', descriptors: [d('tenant', 'reload')] })).statuses?.[0]
        ?.current_limit?.requests_per_unit;
    const errors = async () => {
      const text = await (await fetch(`${httpUrl}/metrics`)).text();
      return Number(/^tollgate_config_loads_total\{result="error"\} (\d+)/m.exec(text)?.[1] ?? 0);
    };
    expect(await limitOf()).toBe(100);
    // Replaced whole, as a deploy (or a ConfigMap) does: a file truncated and then written can be
    // read in between on a busy machine, and that half would count as one more failed load.
    const replaceRules = (text: string) => {
      writeFileSync(`${rulesPath}.tmp`, text);
      renameSync(`${rulesPath}.tmp`, rulesPath);
    };
    const failedBefore = await errors();
    for (const bad of [
      'domain: hostile\ndescriptors:\n  - key: tenant\n    rate_limit: {unit: hour, requests_per_unit: -5}\n',
      'domain: [unclosed\n',
    ]) {
      const failed = await errors();
      replaceRules(bad);
      // The refusal's count is the event; the cap is only for a machine so busy that the
      // watcher and the loader run seconds late.
      await eventually(async () => (await errors()) > failed, 30_000);
      expect(await limitOf()).toBe(100);
      expect(tollgate.child.exitCode).toBeNull();
    }
    expect((await errors()) - failedBefore).toBe(2);
    // The watcher still works: good rules are taken.
    replaceRules(RULES.replace('requests_per_unit: 100}', 'requests_per_unit: 150}'));
    await eventually(async () => (await limitOf()) === 150, 30_000);
    replaceRules(RULES);
    await eventually(async () => (await limitOf()) === 100, 30_000);
  }, 120_000);

  it('keeps answering while a reload of an alias bomb is loading', async () => {
    // The service loads rules on its event loop: a loader that takes seconds stops every call.
    const path = writeRules(
      'domain: other\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: 5}\n',
    );
    const victim = await spawnTollgate(RULES, { CONFIG_PATH: path, CONFIG_POLL_INTERVAL: '200ms' });
    try {
      const request = { domain: 'other', descriptors: [d('k', 'v')] };
      expect((await callCheck(victim.client, request)).overall_code).toBe('OK');
      writeFileSync(path, laughs(9));
      await new Promise((r) => setTimeout(r, 500)); // the watcher's debounce is 100 ms
      const answered: number[] = [];
      for (let i = 0; i < 2; i++) {
        const started = performance.now();
        const ok = await callCheck(victim.client, request, 1_000).then(
          () => true,
          () => false,
        );
        answered.push(ok ? performance.now() - started : Infinity);
      }
      console.log(
        `[hostile] calls while an alias bomb reloads: ${answered.map((ms) => (ms === Infinity ? 'no answer in 1 s' : `${ms.toFixed(0)} ms`)).join(', ')}`,
      );
      expect(
        answered.every((ms) => ms < 1_000),
        'tollgate stopped answering during the reload',
      ).toBe(true);
    } finally {
      // It may be stuck in the loader, deaf to SIGTERM.
      victim.client.close();
      victim.child.kill('SIGKILL');
    }
  }, 30_000);
});

describe('a flood of distinct tenants', () => {
  const FLOOD_RULES = `
domain: flood
descriptors:
  - key: tenant
    rate_limit: {unit: second, requests_per_unit: 10}
`;
  const floodRules = () =>
    loadRules(writeRules(FLOOD_RULES), { defaultAlgorithm: 'sliding_window' });
  /** Tenants per request: one script call decides 16 tenants, so the flood is quick. */
  const PER_REQUEST = 16;
  const floodCheck = (i: number) => ({
    domain: 'flood',
    hitsAddend: 0,
    descriptors: Array.from({ length: PER_REQUEST }, (_, j) => ({
      entries: [{ key: 'tenant', value: `tenant-${i * PER_REQUEST + j}` }],
    })),
  });
  async function flood(
    decide: (check: ReturnType<typeof floodCheck>) => Promise<{ code: string }>,
    tenants: number,
    during?: () => Promise<void>,
  ) {
    let next = 0;
    let ok = 0;
    const requests = tenants / PER_REQUEST;
    const sampler = (async () => {
      while (next < requests) {
        await during?.();
        await new Promise((r) => setTimeout(r, 200));
      }
    })();
    await Promise.all(
      Array.from({ length: 64 }, async () => {
        while (next < requests) if ((await decide(floodCheck(next++))).code === 'OK') ok += 1;
      }),
    );
    await sampler;
    return ok * PER_REQUEST;
  }

  it('200,000 tenants in the memory store: one counter each, all gone once their windows pass', async () => {
    const clock = manualClock();
    const store = createMemoryStore({ clock: () => clock.now, sweepIntervalMs: 20 });
    const rules = floodRules();
    const limiter = createLimiter({
      rules: () => rules,
      store,
      clock: () => clock.now,
      defaultAlgorithm: 'sliding_window',
      keyPrefix: '',
      failureMode: 'error',
    });
    const started = performance.now();
    const allowed = await flood((c) => limiter.decide(c), 200_000);
    const ms = performance.now() - started;
    const size = store.size();
    // A sliding window's counter lasts two windows; then the sweep drops it.
    clock.advance(2_000);
    const swept = performance.now();
    await eventually(async () => store.size() === 0, 5_000);
    console.log(
      `[hostile] memory store: 200,000 tenants in ${ms.toFixed(0)} ms, ${size} counters; ` +
        `0 counters ${(performance.now() - swept).toFixed(0)} ms after the clock passed two windows`,
    );
    expect(allowed).toBe(200_000);
    expect(size).toBe(200_000);
    await store.close();
  });

  it('100,000 tenants in Redis: every key has a TTL, small keys, all expire after two windows', async () => {
    await redis.client.flushall();
    const settings = readSettings({ REDIS_URL: redis.url, REDIS_TIMEOUT: '5s' });
    const store = createRedisStore(settings.redis!);
    await store.ping(); // connected: the store queues nothing while it connects
    const rules = floodRules();
    const limiter = createLimiter({
      rules: () => rules,
      store,
      clock: undefined,
      defaultAlgorithm: 'sliding_window',
      keyPrefix: '',
      failureMode: 'error',
    });
    const memory = async () =>
      Number(/^used_memory:(\d+)/m.exec(await redis.client.info('memory'))?.[1]);
    const baseline = await memory();
    // Sampled while the flood runs, when its keys are fresh: keys and keys with a TTL (from one
    // INFO, so at one instant), used memory, and the TTL and size of a few keys.
    const samples: { keys: number; expires: number; bytesPerKey: number }[] = [];
    const ttls: number[] = [];
    const sizes: number[] = [];
    const sample = async () => {
      const info = await redis.client.info();
      const line = /^db0:keys=(\d+),expires=(\d+)/m.exec(info);
      const used = Number(/^used_memory:(\d+)/m.exec(info)?.[1]);
      if (!line) return;
      const keys = Number(line[1]);
      samples.push({ keys, expires: Number(line[2]), bytesPerKey: (used - baseline) / keys });
      const [, found] = await redis.client.scan('0', 'MATCH', 'tg:*', 'COUNT', 50);
      const replies = await redis.client
        .pipeline(
          found.flatMap((key) => [
            ['pttl', key],
            ['memory', 'usage', key],
          ]),
        )
        .exec();
      for (const [i, [, value]] of (replies ?? []).entries()) {
        // -2 and null: the key expired between SCAN and the pipeline.
        if (i % 2 === 0 && value !== -2) ttls.push(Number(value));
        if (i % 2 === 1 && typeof value === 'number') sizes.push(value);
      }
    };
    const started = performance.now();
    const allowed = await flood((c) => limiter.decide(c), 100_000, sample);
    const ms = performance.now() - started;
    await sample();
    const peak = Math.max(...samples.map((x) => x.keys));
    const bytesPerKey = sizes.reduce((sum, n) => sum + n, 0) / sizes.length;
    // Over few keys, Redis's fixed costs (the flood's own query buffers, more of them on a busy
    // machine) weigh on each key: only samples of many keys say what a key costs.
    const usedPerKey = Math.max(...samples.filter((x) => x.keys > 5_000).map((x) => x.bytesPerKey));
    const expiring = performance.now();
    // Redis's active expiry gets to 100,000 expired keys in seconds, slower on a busy machine.
    await eventually(async () => (await redis.client.dbsize()) === 0, 40_000);
    const expiredMs = performance.now() - expiring;
    const after = (await memory()) - baseline;
    console.log(
      `[hostile] Redis: 100,000 tenants in ${ms.toFixed(0)} ms; at most ${peak} keys at once; ` +
        `in ${samples.length} samples, every key had a TTL, ${ttls.length} sampled keys at most ${Math.max(...ttls)} ms; ` +
        `MEMORY USAGE ${bytesPerKey.toFixed(0)} bytes a key, used_memory at most +${usedPerKey.toFixed(0)} bytes a key; ` +
        `all expired ${expiredMs.toFixed(0)} ms after the flood, used_memory then ${(after / 1e3).toFixed(0)} KB over the start`,
    );
    expect(allowed).toBe(100_000);
    expect(samples.length).toBeGreaterThan(3);
    for (const x of samples) expect(x.expires).toBe(x.keys);
    expect(ttls.length).toBeGreaterThan(20);
    // -1 would be a key without a TTL; a sliding window's key lives at most two windows.
    for (const ttl of ttls) expect(ttl >= 0 && ttl <= 2_000, `PTTL ${ttl}`).toBe(true);
    expect(sizes.length).toBeGreaterThan(20);
    expect(bytesPerKey).toBeLessThan(256);
    expect(usedPerKey).toBeLessThan(400);
    expect(after).toBeLessThan(2_000_000);
    await store.close();
  }, 90_000);
});
