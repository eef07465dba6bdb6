// The typed client against the real service, as a calling service sees it: decisions as values,
// malformed requests as TollgateRequestError, and an unreachable or silent tollgate answered per
// whenUnavailable within the deadline.
import { createServer, type Server, type Socket } from 'node:net';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {
  createTollgateClient,
  TollgateRequestError,
  TollgateUnavailableError,
  type TollgateClient,
  type TollgateClientOptions,
} from '@tollgate/client';
import { freePort } from '../support/ports.js';
import { startTollgate, type Tollgate } from '../support/tollgate.js';

const RULES = `
domain: api
descriptors:
  - key: tenant
    rate_limit: {unit: minute, requests_per_unit: 2, algorithm: fixed_window, name: per-tenant}
    descriptors:
      - key: tenant
        rate_limit: {unit: hour, requests_per_unit: 100}
  - key: big
    rate_limit: {unit: minute, requests_per_unit: 3}
`;

let tollgate: Tollgate;
const clients: TollgateClient[] = [];
beforeAll(async () => {
  tollgate = await startTollgate({ rules: RULES });
});
afterAll(async () => {
  for (const client of clients) client.close();
  await tollgate?.stop();
});

function client(options: Partial<TollgateClientOptions> = {}): TollgateClient {
  const created = createTollgateClient({
    address: tollgate.address,
    deadlineMs: 5_000,
    whenUnavailable: 'throw',
    ...options,
  });
  clients.push(created);
  return created;
}

describe('a reachable tollgate', () => {
  it('allows with the limit, what remains and when it resets', async () => {
    const result = await client().check({ domain: 'api', descriptors: [{ tenant: 'allowed' }] });
    expect(result).toMatchObject({
      source: 'service',
      allowed: true,
      code: 'OK',
      statuses: [
        {
          code: 'OK',
          currentLimit: { requestsPerUnit: 2, unit: 'minute', name: 'per-tenant' },
          limitRemaining: 1,
          durationUntilResetMs: 60_000,
        },
      ],
    });
    expect(result.retryAfterSeconds).toBeUndefined();
    expect(result.headers.map((header) => header.key)).toContain('RateLimit');
  });

  it('denies over the limit and says when to retry', async () => {
    const tollgateClient = client();
    const request = { domain: 'api', descriptors: [{ tenant: 'denied' }] };
    await tollgateClient.check(request);
    await tollgateClient.check(request);
    tollgate.clock.advance(10_500);
    const result = await tollgateClient.check(request);
    expect(result).toMatchObject({
      source: 'service',
      allowed: false,
      code: 'OVER_LIMIT',
      statuses: [{ code: 'OVER_LIMIT', limitRemaining: 0, durationUntilResetMs: 49_500 }],
      retryAfterSeconds: 50,
    });
    expect(result.headers).toContainEqual({ key: 'Retry-After', value: '50' });
  });

  it('charges hitsAddend, and sends repeated keys in the tuple form', async () => {
    const tollgateClient = client();
    const first = await tollgateClient.check({
      domain: 'api',
      descriptors: [{ big: 'x' }],
      hitsAddend: 3,
    });
    expect(first.statuses[0]?.limitRemaining).toBe(0);
    const nested = await tollgateClient.check({
      domain: 'api',
      descriptors: [
        [
          ['tenant', 'outer'],
          ['tenant', 'inner'],
        ],
      ],
    });
    expect(nested.statuses[0]?.currentLimit).toEqual({
      requestsPerUnit: 100,
      unit: 'hour',
      name: '',
    });
  });

  it('rejects a malformed request with TollgateRequestError and the service message', async () => {
    const check = client().check({ domain: 'api', descriptors: [{}] });
    await expect(check).rejects.toThrow(TollgateRequestError);
    await expect(check).rejects.toMatchObject({
      grpcCode: 'INVALID_ARGUMENT',
      message: 'descriptors[0] has no entries',
    });
  });
});

describe('an unavailable tollgate', () => {
  let refusing: string;
  let silent: Server;
  let silentAddress: string;
  const sockets: Socket[] = [];
  beforeAll(async () => {
    refusing = `127.0.0.1:${await freePort()}`;
    // Accepts connections and never speaks HTTP/2: every call can only end at its deadline.
    silent = createServer((socket) => sockets.push(socket));
    await new Promise<void>((resolve) => silent.listen(0, '127.0.0.1', resolve));
    const address = silent.address();
    silentAddress = `127.0.0.1:${typeof address === 'object' && address ? address.port : 0}`;
  });
  afterAll(async () => {
    for (const socket of sockets) socket.destroy();
    await new Promise((resolve) => silent.close(resolve));
  });

  const request = { domain: 'api', descriptors: [{ tenant: 'acme' }] };

  it.each([
    { whenUnavailable: 'allow', allowed: true, code: 'OK' },
    { whenUnavailable: 'deny', allowed: false, code: 'OVER_LIMIT' },
  ] as const)(
    "answers '$whenUnavailable' when nothing listens",
    async ({ whenUnavailable, allowed, code }) => {
      const started = Date.now();
      const result = await client({ address: refusing, deadlineMs: 200, whenUnavailable }).check(
        request,
      );
      expect(Date.now() - started).toBeLessThan(200 + 500);
      expect(result).toMatchObject({ source: 'fallback', allowed, code, statuses: [] });
      expect(result.error).toBeInstanceOf(TollgateUnavailableError);
      expect(result.error?.grpcCode).toBe('UNAVAILABLE');
    },
  );

  it('falls back at the deadline when tollgate does not answer', async () => {
    const started = Date.now();
    const result = await client({
      address: silentAddress,
      deadlineMs: 150,
      whenUnavailable: 'deny',
    }).check(request);
    const elapsed = Date.now() - started;
    expect(elapsed).toBeGreaterThanOrEqual(140);
    expect(elapsed).toBeLessThan(150 + 500);
    expect(result).toMatchObject({ source: 'fallback', allowed: false, code: 'OVER_LIMIT' });
    expect(result.error?.grpcCode).toBe('DEADLINE_EXCEEDED');
  });

  it("rejects with TollgateUnavailableError under 'throw'", async () => {
    await expect(
      client({ address: refusing, deadlineMs: 200, whenUnavailable: 'throw' }).check(request),
    ).rejects.toThrow(TollgateUnavailableError);
    await expect(
      client({ address: silentAddress, deadlineMs: 100, whenUnavailable: 'throw' }).check(request),
    ).rejects.toMatchObject({ name: 'TollgateUnavailableError', grpcCode: 'DEADLINE_EXCEEDED' });
  });

  it('is served again within two seconds of tollgate coming back', async () => {
    const port = await freePort();
    const serve = () => startTollgate({ rules: RULES, env: { GRPC_PORT: String(port) } });
    let restarted: Tollgate | undefined = await serve();
    const caller = client({
      address: `127.0.0.1:${port}`,
      deadlineMs: 200,
      whenUnavailable: 'allow',
    });
    try {
      expect((await caller.check(request)).source).toBe('service');
      await restarted.stop();
      restarted = undefined;
      // Six seconds of failed reconnects: grpc-js's own backoff (1 s, growing 1.6 times a try)
      // would by then wait about four seconds before the next one.
      const down = Date.now();
      while (Date.now() - down < 6_000) {
        expect((await caller.check(request)).source).toBe('fallback');
        await new Promise((resolve) => setTimeout(resolve, 200));
      }
      restarted = await serve();
      const back = Date.now();
      while ((await caller.check(request)).source !== 'service') {
        expect(Date.now() - back).toBeLessThan(2_000);
        await new Promise((resolve) => setTimeout(resolve, 50));
      }
    } finally {
      await restarted?.stop();
    }
  });
});
