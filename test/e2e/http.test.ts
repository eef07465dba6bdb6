// The HTTP port as a caller sees it: the real server on a free port over a real limiter and the
// in-memory store, called with fetch.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { Check, Decision } from '../../src/core/check.js';
import { StoreError } from '../../src/core/errors.js';
import {
  createDebugServer,
  createHttpServer,
  createInFlightBound,
  type HttpServer,
} from '../../src/servers/http/server.js';
import { createLimiter } from '../../src/decision/limiter.js';
import { loadRules } from '../../src/rules/loadRules.js';
import { createMemoryStore } from '../../src/store/memoryStore.js';
import type { Store } from '../../src/store/Store.js';

const RULES = `
domain: api
descriptors:
  - key: tenant
    rate_limit: {name: per-tenant, unit: minute, requests_per_unit: 3, algorithm: fixed_window}
  - key: team
    metadata: {team: orders, tier: 2}
    rate_limit: {unit: minute, requests_per_unit: 3}
`;

// The rules file, written as the service would read it. (test/support/tollgate.ts has the same
// helper, but importing it pulls in the whole service, which this test does not need.)
function writeRules(yaml: string): string {
  const path = join(mkdtempSync(join(tmpdir(), 'tollgate-http-')), 'rules.yaml');
  writeFileSync(path, yaml);
  return path;
}

// A manual clock, 58.5 s into a minute: a fixed minute window resets in 1.5 s.
const now = Date.UTC(2030, 0, 1) + 58_500;
const memory = createMemoryStore({ clock: () => now });
let storeDown = false;
const store: Store = {
  ...memory,
  decide: (counters, nowMs) =>
    storeDown
      ? Promise.reject(new StoreError('redis timed out after 15ms', 'timeout'))
      : memory.decide(counters, nowMs),
};
const rules = loadRules(writeRules(RULES), { defaultAlgorithm: 'sliding_window' });
const limiter = createLimiter({
  rules: () => rules,
  store,
  clock: () => now,
  defaultAlgorithm: 'sliding_window',
  keyPrefix: '',
  failureMode: 'error',
  dynamicMetadata: true,
});

let health = { serving: true, reason: 'OK' };
const internalErrors: unknown[] = [];
const checks: Check[] = [];
const METRICS = '# TYPE tollgate_checks_total counter\ntollgate_checks_total 7\n';

/** The real limiter's decision; the domain `bug` stands for a bug in it. */
async function decide(check: Check): Promise<Decision> {
  checks.push(check);
  if (check.domain === 'bug')
    throw new TypeError("cannot read properties of undefined (reading 'x')");
  return limiter.decide(check);
}

let server: HttpServer;
let base: string;
beforeAll(async () => {
  server = createHttpServer({
    decide,
    health: () => health,
    metrics: async () => ({
      contentType: 'text/plain; version=0.0.4; charset=utf-8',
      body: METRICS,
    }),
    rlconfig: async () =>
      Buffer.from('api.tenant: unit=MINUTE requests_per_unit=3\napi.tenant_acme: unlimited\n'),
    limits: { maxDescriptors: 4, maxEntries: 3, maxEntryBytes: 16 },
    onInternalError: (error) => internalErrors.push(error),
  });
  base = `http://127.0.0.1:${await server.listen('127.0.0.1', 0)}`;
});
afterAll(async () => {
  await server?.close(1_000);
  await memory.close();
});

async function post(body: unknown): Promise<{ status: number; type: string; body: unknown }> {
  const response = await fetch(`${base}/json`, {
    method: 'POST',
    body: typeof body === 'string' ? body : JSON.stringify(body),
  });
  const type = response.headers.get('content-type') ?? '';
  const text = await response.text();
  return {
    status: response.status,
    type,
    body: type === 'application/json' ? JSON.parse(text) : text,
  };
}

const tenant = (value: string) => ({ entries: [{ key: 'tenant', value }] });

describe('GET /healthcheck', () => {
  it('answers 200 OK while serving, and 500 with the reason while not', async () => {
    const ok = await fetch(`${base}/healthcheck`);
    expect([ok.status, ok.headers.get('content-type'), await ok.text()]).toEqual([
      200,
      'text/plain; charset=utf-8',
      'OK',
    ]);

    for (const reason of [
      'NOT_SERVING: draining',
      'NOT_SERVING: store unreachable (FAILURE_MODE=error)',
    ]) {
      health = { serving: false, reason };
      const down = await fetch(`${base}/healthcheck`);
      expect([down.status, await down.text()]).toEqual([500, reason]);
    }
    health = { serving: true, reason: 'OK' };
  });
});

describe('POST /json', () => {
  it('answers OK with 200, then OVER_LIMIT with 429, in proto3 JSON', async () => {
    const request = { domain: 'api', descriptors: [tenant('http-a')] };
    const limit = { requestsPerUnit: 3, unit: 'MINUTE', name: 'per-tenant' };
    expect(await post(request)).toEqual({
      status: 200,
      type: 'application/json',
      body: {
        overallCode: 'OK',
        statuses: [
          { code: 'OK', currentLimit: limit, limitRemaining: 2, durationUntilReset: '1.500s' },
        ],
        responseHeadersToAdd: [
          { key: 'RateLimit-Policy', value: '"per-tenant";q=3;w=60' },
          { key: 'RateLimit', value: '"per-tenant";r=2;t=2' },
        ],
        // RESPONSE_DYNAMIC_METADATA is on here: every answer says what was asked.
        dynamicMetadata: { domain: 'api', descriptors: [{ entries: ['tenant=http-a'] }] },
      },
    });
    await post(request);
    await post(request);
    const over = await post(request);
    expect([over.status, over.type]).toEqual([429, 'application/json']);
    expect(over.body).toMatchObject({
      overallCode: 'OVER_LIMIT',
      responseHeadersToAdd: expect.arrayContaining([{ key: 'Retry-After', value: '2' }]),
    });
    // proto3 JSON leaves out a limitRemaining of 0.
    expect((over.body as { statuses: unknown }).statuses).toEqual([
      { code: 'OVER_LIMIT', currentLimit: limit, durationUntilReset: '1.500s' },
    ]);
  });

  it('carries the dynamic metadata as a plain JSON object', async () => {
    const { body } = await post({
      domain: 'api',
      descriptors: [{ entries: [{ key: 'team', value: 'a' }] }],
    });
    expect(body).toMatchObject({
      overallCode: 'OK',
      dynamicMetadata: {
        domain: 'api',
        descriptors: [{ entries: ['team=a'] }],
        metadata: { team: 'orders', tier: 2 },
      },
    });
  });

  it('accepts the original snake_case field names and numbers as strings', async () => {
    const reply = await post({
      domain: 'api',
      hits_addend: '2',
      descriptors: [{ entries: [{ key: 'tenant', value: 'http-snake' }] }],
    });
    expect(reply.status).toBe(200);
    expect(reply.body).toMatchObject({ statuses: [{ code: 'OK', limitRemaining: 1 }] });
  });

  it('takes a descriptor hitsAddend as a number or a decimal string, up to 2^64 - 1', async () => {
    const costs = async (hitsAddend: unknown, value: string) =>
      post({ domain: 'api', descriptors: [{ ...tenant(value), hitsAddend }] });
    expect((await costs('1', 'http-cost')).body).toMatchObject({
      statuses: [{ code: 'OK', limitRemaining: 2 }],
    });
    expect((await costs(2, 'http-cost')).body).toMatchObject({ statuses: [{ code: 'OK' }] });
    expect((await costs('0', 'http-cost')).status).toBe(429); // 0 checks without consuming
    // 2^64 - 1 arrives exactly, and as a cost that can never fit it has no reset time.
    const never = await costs('18446744073709551615', 'http-max');
    expect(checks.at(-1)?.descriptors[0]?.hitsAddend).toBe(2n ** 64n - 1n);
    expect(never).toMatchObject({ status: 429, body: { statuses: [{ code: 'OVER_LIMIT' }] } });
    expect((never.body as { statuses: object[] }).statuses[0]).not.toHaveProperty(
      'durationUntilReset',
    );
  });

  it('takes a limit override with the unit as a name or a number', async () => {
    for (const unit of ['SECOND', 1]) {
      const reply = await post({
        domain: 'api',
        descriptors: [{ ...tenant(`http-ov-${unit}`), limit: { requestsPerUnit: 5, unit } }],
      });
      expect(reply.body).toMatchObject({
        statuses: [
          { code: 'OK', currentLimit: { requestsPerUnit: 5, unit: 'SECOND' }, limitRemaining: 4 },
        ],
      });
    }
  });

  it.each([
    ['a body that is not JSON', '{"domain": "api",', /^request body is not JSON: /],
    ['a body that is not an object', '[1, 2]', /^the request is not a JSON object$/],
    ['a domain that is not a string', { domain: 7, descriptors: [] }, /^domain is not a string$/],
    [
      'a field that does not exist',
      { domain: 'api', tenant: 'x' },
      /^tenant is not a field of RateLimitRequest$/,
    ],
    ['a field given twice', { hitsAddend: 1, hits_addend: 1 }, /^hits_addend is given twice$/],
    [
      'entries that are not a list',
      { domain: 'api', descriptors: [{ entries: { key: 'tenant' } }] },
      /^descriptors\[0\].entries is not a list$/,
    ],
    [
      'a fractional cost',
      { domain: 'api', descriptors: [{ ...tenant('x'), hitsAddend: 1.5 }] },
      /^descriptors\[0\].hitsAddend is not an integer$/,
    ],
    [
      'a 64-bit cost as an inexact JSON number',
      { domain: 'api', descriptors: [{ ...tenant('x'), hitsAddend: 2 ** 64 }] },
      /as a decimal string$/,
    ],
    [
      'a negative cost',
      { domain: 'api', hitsAddend: -1, descriptors: [tenant('x')] },
      /^hitsAddend is out of range for uint32$/,
    ],
    [
      'an unknown unit name',
      {
        domain: 'api',
        descriptors: [{ ...tenant('x'), limit: { requestsPerUnit: 1, unit: 'FORTNIGHT' } }],
      },
      /^descriptors\[0\].limit.unit: 'FORTNIGHT' is not a RateLimitUnit$/,
    ],
    // From here on, the messages are the gRPC codec's own.
    ['an empty domain', { domain: '', descriptors: [tenant('x')] }, /^domain is empty$/],
    ['no domain', { descriptors: [tenant('x')] }, /^domain is empty$/],
    ['no descriptors', { domain: 'api', descriptors: [] }, /^no descriptors$/],
    [
      'a descriptor without entries',
      { domain: 'api', descriptors: [{}] },
      /^descriptors\[0\] has no entries$/,
    ],
    [
      'too many descriptors',
      { domain: 'api', descriptors: Array.from({ length: 5 }, () => tenant('x')) },
      /^5 descriptors exceed MAX_DESCRIPTORS \(4\)$/,
    ],
    [
      'a value over MAX_ENTRY_BYTES',
      { domain: 'api', descriptors: [tenant('x'.repeat(17))] },
      /^descriptors\[0\].entries\[0\].value is 17 bytes, over MAX_ENTRY_BYTES \(16\)$/,
    ],
    [
      'a limit override of unit UNKNOWN',
      {
        domain: 'api',
        descriptors: [{ ...tenant('x'), limit: { requestsPerUnit: 1, unit: 'UNKNOWN' } }],
      },
      /^descriptors\[0\].limit.unit is UNKNOWN$/,
    ],
    [
      'a lone surrogate in a value',
      '{"domain":"api","descriptors":[{"entries":[{"key":"tenant","value":"\\ud800"}]}]}',
      /^descriptors\[0\].entries\[0\].value is not valid UTF-8$/,
    ],
  ])('answers 400 with the fault for %s', async (_case, body, message) => {
    const reply = await post(body);
    expect(reply.status).toBe(400);
    expect(reply.type).toBe('text/plain; charset=utf-8');
    expect(reply.body).toMatch(message);
  });

  it('answers 503 when the store fails with FAILURE_MODE=error, then recovers', async () => {
    storeDown = true;
    try {
      expect(await post({ domain: 'api', descriptors: [tenant('http-down')] })).toEqual({
        status: 503,
        type: 'text/plain; charset=utf-8',
        body: 'store unavailable: redis timed out after 15ms',
      });
    } finally {
      storeDown = false;
    }
    expect((await post({ domain: 'api', descriptors: [tenant('http-down')] })).status).toBe(200);
  });

  it('answers 500 without internals for a bug, and reports it', async () => {
    const reply = await post({ domain: 'bug', descriptors: [tenant('x')] });
    expect([reply.status, reply.body]).toEqual([500, 'internal error']);
    expect(internalErrors.at(-1)).toBeInstanceOf(TypeError);
  });

  it('answers 413 for a body over 1 MiB, and keeps serving', async () => {
    const huge = JSON.stringify({
      domain: 'api',
      descriptors: [tenant('x'.repeat(2 * 1024 * 1024))],
    });
    const reply = await post(huge);
    expect([reply.status, reply.body]).toEqual([413, 'request body over 1048576 bytes']);
    expect((await post({ domain: 'api', descriptors: [tenant('http-after')] })).status).toBe(200);
  });

  it('answers 413 for a streamed body without Content-Length once it passes 1 MiB', async () => {
    const chunk = new Uint8Array(64 * 1024).fill(0x20);
    let sent = 0;
    const body = new ReadableStream<Uint8Array>({
      pull(controller) {
        if (sent++ < 32) controller.enqueue(chunk);
        else controller.close();
      },
    });
    const init = { method: 'POST', body, duplex: 'half' } as RequestInit;
    const response = await fetch(`${base}/json`, init);
    expect([response.status, await response.text()]).toEqual([
      413,
      'request body over 1048576 bytes',
    ]);
  });
});

describe('the other endpoints', () => {
  it('GET /metrics passes the content type and body through', async () => {
    const response = await fetch(`${base}/metrics`);
    expect(response.status).toBe(200);
    expect(response.headers.get('content-type')).toBe('text/plain; version=0.0.4; charset=utf-8');
    expect(await response.text()).toBe(METRICS);
  });

  it('GET /rlconfig lists one line per rule', async () => {
    const response = await fetch(`${base}/rlconfig`);
    expect(response.status).toBe(200);
    expect(response.headers.get('content-type')).toBe('text/plain; charset=utf-8');
    expect(await response.text()).toBe(
      'api.tenant: unit=MINUTE requests_per_unit=3\napi.tenant_acme: unlimited\n',
    );
  });

  it('answers 404 for an unknown path and 405 with Allow for a wrong method', async () => {
    expect((await fetch(`${base}/nope`)).status).toBe(404);
    const getJson = await fetch(`${base}/json`);
    expect([getJson.status, getJson.headers.get('allow')]).toEqual([405, 'POST']);
    const postHealth = await fetch(`${base}/healthcheck`, { method: 'POST', body: '{}' });
    expect([postHealth.status, postHealth.headers.get('allow')]).toEqual([405, 'GET, HEAD']);
  });

  it('answers HEAD like GET, without a body', async () => {
    const response = await fetch(`${base}/healthcheck`, { method: 'HEAD' });
    expect([
      response.status,
      response.headers.get('content-length'),
      await response.text(),
    ]).toEqual([200, '2', '']);
  });

  it('ignores a query string', async () => {
    expect((await fetch(`${base}/healthcheck?verbose=1`)).status).toBe(200);
  });
});

describe('requests at once to /metrics and /rlconfig', () => {
  it('past the bound, 503 with Retry-After, counted; a place frees once its answer is sent', async () => {
    let release = () => {};
    const held = new Promise<void>((resolve) => (release = resolve));
    const refused: string[] = [];
    const debug = createDebugServer({
      rlconfig: async () => {
        await held;
        return Buffer.from('api.tenant: unlimited\n');
      },
      rlconfigBound: createInFlightBound(2, () => refused.push('http_rlconfig')),
    });
    const url = `http://127.0.0.1:${await debug.listen('127.0.0.1', 0)}/rlconfig`;
    try {
      const waiting = [fetch(url), fetch(url)];
      await new Promise((resolve) => setTimeout(resolve, 100));
      const third = await fetch(url);
      expect([third.status, third.headers.get('retry-after')]).toEqual([503, '1']);
      expect(await third.text()).toBe('too many /rlconfig requests at once; try again shortly');
      expect(refused).toEqual(['http_rlconfig']);
      release();
      for (const response of await Promise.all(waiting)) {
        expect([response.status, await response.text()]).toEqual([200, 'api.tenant: unlimited\n']);
      }
      expect((await fetch(url)).status).toBe(200);
      expect((await fetch(url.replace('/rlconfig', '/metrics'))).status).toBe(404);
    } finally {
      await debug.close(1_000);
    }
  });
});

describe('close', () => {
  const stalled = () => {
    let release = () => {};
    const held = new Promise<void>((resolve) => (release = resolve));
    const http = createHttpServer({
      decide: async (check) => {
        await held;
        return {
          code: 'OK',
          statuses: check.descriptors.map(() => ({ code: 'OK', limitRemaining: 0 })),
        };
      },
      health: () => ({ serving: true, reason: 'OK' }),
      metrics: async () => ({ contentType: 'text/plain', body: '' }),
      limits: { maxDescriptors: 4, maxEntries: 3, maxEntryBytes: 16 },
    });
    return { http, release };
  };
  const call = (port: number) =>
    fetch(`http://127.0.0.1:${port}/json`, {
      method: 'POST',
      body: JSON.stringify({ domain: 'api', descriptors: [tenant('x')] }),
    });
  const eventLoopTurn = () => new Promise((resolve) => setTimeout(resolve, 50));

  it('lets a request in flight finish and refuses new connections', async () => {
    const { http, release } = stalled();
    const port = await http.listen('127.0.0.1', 0);
    const inFlight = call(port);
    await eventLoopTurn();
    const closed = http.close(5_000);
    await expect(fetch(`http://127.0.0.1:${port}/healthcheck`)).rejects.toThrow();
    release();
    expect((await inFlight).status).toBe(200);
    await closed;
  });

  it('drops requests still in flight after the grace period', async () => {
    const { http, release } = stalled();
    const port = await http.listen('127.0.0.1', 0);
    const inFlight = call(port);
    await eventLoopTurn();
    const started = Date.now();
    await http.close(100);
    expect(Date.now() - started).toBeLessThan(2_000);
    await expect(inFlight).rejects.toThrow();
    release();
  });
});
