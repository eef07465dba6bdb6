import { writeFileSync } from 'node:fs';
import { createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createRateLimitClient } from '@tollgate/client';
import { createService } from '../../src/process/service.js';
import { readSettings } from '../../src/process/settings.js';
import { freePort } from '../support/ports.js';
import { afterEach, describe, expect, it } from 'vitest';
import {
  callCheck,
  codes,
  d,
  eventually,
  healthStatus,
  startTollgate,
  writeRules,
  type Tollgate,
} from '../support/tollgate.js';

// The whole service as an operator runs it: the HTTP port beside gRPC, metrics that move with
// the decisions under the reference's series names, and rules that reload on an edit while a
// broken edit keeps the previous rules serving.

const rules = (limit: number) => `
domain: svc
descriptors:
  - key: tenant
    rate_limit: {unit: hour, requests_per_unit: ${limit}, algorithm: fixed_window}
    descriptors:
      - key: route
        rate_limit: {name: per-route, unit: hour, requests_per_unit: 100}
`;

let tollgate: Tollgate | undefined;
afterEach(async () => {
  await tollgate?.stop();
  tollgate = undefined;
});

const get = async (path: string) => {
  const response = await fetch(`${tollgate!.httpUrl}${path}`);
  return { status: response.status, body: await response.text() };
};

/** The value of one series in the Prometheus text, or 0 when it is absent. */
function sample(text: string, series: string): number {
  const line = text.split('\n').find((l) => l.startsWith(`${series} `));
  return line === undefined ? 0 : Number(line.slice(series.length + 1));
}

describe('the HTTP port of the running service', () => {
  it('answers /healthcheck, /json, /rlconfig and /metrics', async () => {
    tollgate = await startTollgate({ rules: rules(1) });
    expect(await get('/healthcheck')).toEqual({ status: 200, body: 'OK' });

    const json = (body: unknown) =>
      fetch(`${tollgate!.httpUrl}/json`, { method: 'POST', body: JSON.stringify(body) });
    const request = { domain: 'svc', descriptors: [{ entries: [{ key: 'tenant', value: 'a' }] }] };
    const first = await json(request);
    expect(first.status).toBe(200);
    expect(await first.json()).toMatchObject({ overallCode: 'OK' });
    const second = await json(request);
    expect(second.status).toBe(429);
    expect(await second.json()).toMatchObject({ overallCode: 'OVER_LIMIT' });
    expect((await json({ domain: '' })).status).toBe(400);

    const config = await get('/rlconfig');
    expect(config.status).toBe(200);
    expect(config.body.split('\n').filter(Boolean)).toEqual([
      'svc.tenant: unit=HOUR requests_per_unit=1, algorithm=fixed_window, shadow_mode: false',
      'svc.tenant.route: unit=HOUR requests_per_unit=100, algorithm=sliding_window, name=per-route, shadow_mode: false',
    ]);
  });

  it('moves the reference series on /metrics as decisions are made', async () => {
    tollgate = await startTollgate({ rules: rules(2) });
    const series = (stat: string, key2 = '') =>
      `ratelimit_service_rate_limit_${stat}{domain="svc",key1="tenant",key2="${key2}"}`;
    const before = (await get('/metrics')).body;
    for (let i = 0; i < 3; i++)
      await tollgate.check({ domain: 'svc', descriptors: [d('tenant', 'm')] });
    await tollgate.check({ domain: 'svc', descriptors: [d('tenant', 'm', 'route', '/x')] });
    await tollgate.check({ domain: 'nowhere', descriptors: [d('tenant', 'm')] });
    const after = (await get('/metrics')).body;

    expect(sample(after, series('total_hits')) - sample(before, series('total_hits'))).toBe(3);
    expect(sample(after, series('within_limit')) - sample(before, series('within_limit'))).toBe(2);
    expect(sample(after, series('over_limit')) - sample(before, series('over_limit'))).toBe(1);
    // 2 of 2 used is at or above the 0.8 near-limit ratio.
    expect(sample(after, series('near_limit')) - sample(before, series('near_limit'))).toBe(1);
    expect(sample(after, series('total_hits', 'route'))).toBe(1);
    expect(sample(after, 'tollgate_domain_not_found_total')).toBe(1);
    expect(sample(after, 'ratelimit_service_total_requests{grpc_method="ShouldRateLimit"}')).toBe(
      5,
    );
    expect(after).toMatch(
      /^tollgate_check_duration_seconds_bucket\{le="0.001",outcome="ok"\} \d+$/m,
    );
  });
});

describe('start-up', () => {
  it('says NOT_SERVING on gRPC when its HTTP port turns out to be taken, and fails', async () => {
    const taken = createServer();
    await new Promise<void>((resolve) => taken.listen(0, '127.0.0.1', resolve));
    const address = taken.address();
    if (address === null || typeof address === 'string') throw new Error('no port');
    const grpcPort = await freePort();
    const service = createService({
      settings: readSettings({
        CONFIG_PATH: writeRules(rules(5)),
        GRPC_HOST: '127.0.0.1',
        GRPC_PORT: String(grpcPort),
        HOST: '127.0.0.1',
        PORT: String(address.port),
        LOG_LEVEL: 'silent',
      }),
      env: {},
    });
    try {
      // The gRPC port was bound first, and stays bound until the process would exit.
      await expect(service.start()).rejects.toThrow(/PORT: .* is already in use/);
      expect(await healthStatus(`127.0.0.1:${grpcPort}`)).toBe('NOT_SERVING');
    } finally {
      await service.stop(0);
      taken.close();
    }
  });
});

describe('GRPC_UDS', () => {
  it('serves gRPC on the Unix socket, with HTTP still on its port', async () => {
    const socket = join(tmpdir(), `tollgate-${process.pid}-${Date.now()}.sock`);
    tollgate = await startTollgate({ rules: rules(5), env: { GRPC_UDS: socket } });
    const client = createRateLimitClient(`unix:${socket}`);
    try {
      const response = await callCheck(client, { domain: 'svc', descriptors: [d('tenant', 'u')] });
      expect(response.statuses?.[0]?.limit_remaining).toBe(4);
    } finally {
      client.close();
    }
    expect(await get('/healthcheck')).toEqual({ status: 200, body: 'OK' });
  });
});

describe('malformed requests', () => {
  it('are counted on /metrics, from gRPC and from /json alike', async () => {
    tollgate = await startTollgate({ rules: rules(2) });
    await expect(
      tollgate.check({ domain: '', descriptors: [d('tenant', 'x')] }),
    ).rejects.toMatchObject({
      code: 3,
    });
    const json = await fetch(`${tollgate.httpUrl}/json`, { method: 'POST', body: '{"domain": 1}' });
    expect(json.status).toBe(400);
    const text = (await get('/metrics')).body;
    expect(sample(text, 'tollgate_invalid_requests_total')).toBe(2);
    expect(sample(text, 'ratelimit_service_total_requests{grpc_method="ShouldRateLimit"}')).toBe(2);
  });
});

describe('hot reload in the running service', () => {
  it('applies an edit within a second or two, and keeps the old rules through a broken one', async () => {
    tollgate = await startTollgate({ rules: rules(1) });
    const hit = (value: string) =>
      tollgate!.check({ domain: 'svc', descriptors: [d('tenant', value)] });
    expect(codes(await hit('a'))[0]).toBe('OK');
    expect(codes(await hit('a'))[0]).toBe('OVER_LIMIT');

    // A changed limit keeps its count: 1 used of the new 3 leaves 2.
    writeFileSync(tollgate.rulesPath, rules(3));
    await eventually(
      async () => (await hit('probe')).statuses?.[0]?.current_limit?.requests_per_unit === 3,
      3_000,
    );
    expect((await hit('a')).statuses?.[0]?.limit_remaining).toBe(1);

    const errorsBefore = sample(
      (await get('/metrics')).body,
      'ratelimit_service_config_load_error',
    );
    writeFileSync(tollgate.rulesPath, rules(3).replace('unit: hour', 'unit: hours'));
    await eventually(
      async () =>
        sample((await get('/metrics')).body, 'ratelimit_service_config_load_error') > errorsBefore,
      3_000,
    );
    expect(
      sample((await get('/metrics')).body, 'tollgate_config_loads_total{result="error"}'),
    ).toBe(1);
    // Still the previous rules: 3 an hour.
    expect((await hit('b')).statuses?.[0]?.current_limit?.requests_per_unit).toBe(3);
  });
});

describe('rule keys seen from outside', () => {
  const RULES = `
domain: keys
descriptors:
  - key: plan
    value: gold
    metadata: {tier: gold, weight: 3}
    rate_limit: {unit: hour, requests_per_unit: 10}
  - key: client
    detailed_metric: true
    rate_limit: {unit: hour, requests_per_unit: 10}
`;

  it("returns the reference's dynamic metadata with RESPONSE_DYNAMIC_METADATA", async () => {
    tollgate = await startTollgate({ rules: RULES, env: { RESPONSE_DYNAMIC_METADATA: 'true' } });
    const response = await tollgate.check({
      domain: 'keys',
      hits_addend: 2,
      descriptors: [
        d('plan', 'gold'),
        { ...d('client', 'c9'), limit: { requests_per_unit: 42, unit: 'HOUR' } },
        { ...d('plan', 'silver'), hits_addend: { value: '0' } },
      ],
    });
    const struct = (response as { dynamic_metadata?: unknown }).dynamic_metadata;
    expect(fromStruct(struct)).toEqual({
      domain: 'keys',
      descriptors: [
        { entries: ['plan=gold'] },
        { entries: ['client=c9'], limit: 'requests_per_unit:42 unit:HOUR' },
        { entries: ['plan=silver'], hitsAddend: 0 },
      ],
      hitsAddend: 2,
      // Only from rules that passed with their own limit: gold's.
      metadata: { tier: 'gold', weight: 3 },
    });
    await tollgate.stop();
    tollgate = await startTollgate({ rules: RULES });
    const plain = await tollgate.check({ domain: 'keys', descriptors: [d('plan', 'gold')] });
    expect((plain as { dynamic_metadata?: unknown }).dynamic_metadata).toBeUndefined();
  });

  it('merges the metadata of the passing rules deeply, the first value winning, and leaves out a denied one', async () => {
    tollgate = await startTollgate({
      rules: `
domain: meta
descriptors:
  - key: a
    metadata: {team: first, limits: {soft: 1, owner: a}}
    rate_limit: {unit: hour, requests_per_unit: 10}
  - key: b
    metadata: {team: second, limits: {soft: 2, hard: 9}, extra: true}
    rate_limit: {unit: hour, requests_per_unit: 10}
  - key: c
    metadata: {denied: yes}
    rate_limit: {unit: hour, requests_per_unit: 0}
`,
      env: { RESPONSE_DYNAMIC_METADATA: 'true' },
    });
    const response = await tollgate.check({
      domain: 'meta',
      descriptors: [d('a', '1'), d('b', '1'), d('c', '1')],
    });
    expect(
      fromStruct((response as { dynamic_metadata?: unknown }).dynamic_metadata).metadata,
    ).toEqual({ team: 'first', limits: { soft: 1, owner: 'a', hard: 9 }, extra: true });
  });

  it('labels detailed_metric series with the request value', async () => {
    tollgate = await startTollgate({ rules: RULES });
    await tollgate.check({ domain: 'keys', descriptors: [d('client', 'c1')] });
    await tollgate.check({ domain: 'keys', descriptors: [d('client', 'c2')] });
    const text = (await get('/metrics')).body;
    for (const value of ['c1', 'c2']) {
      expect(
        sample(
          text,
          `ratelimit_service_rate_limit_total_hits{domain="keys",key1="client_${value}",key2=""}`,
        ),
      ).toBe(1);
    }
  });
});

/** A google.protobuf.Struct, as grpc-js decodes it, back into plain JSON. */
function fromStruct(struct: unknown): Record<string, unknown> {
  type Value = {
    stringValue?: string;
    numberValue?: number;
    boolValue?: boolean;
    structValue?: unknown;
    listValue?: { values?: Value[] };
    kind?: string;
  };
  const value = (v: Value): unknown =>
    v.structValue !== undefined && v.structValue !== null
      ? fromStruct(v.structValue)
      : v.listValue
        ? (v.listValue.values ?? []).map(value)
        : v.kind === 'numberValue' || v.numberValue !== undefined
          ? v.numberValue
          : v.kind === 'boolValue' || v.boolValue !== undefined
            ? v.boolValue
            : v.stringValue;
  const fields = (struct as { fields?: Record<string, Value> } | undefined)?.fields ?? {};
  return Object.fromEntries(Object.entries(fields).map(([key, v]) => [key, value(v)]));
}
