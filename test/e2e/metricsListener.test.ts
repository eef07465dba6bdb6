// The metrics on a listener of their own, as Envoy Gateway runs the reference service
// (USE_PROMETHEUS=true, PROMETHEUS_ADDR=:19001) and scrapes that port: tollgate serves its series
// there, and nothing else, so that a NetworkPolicy can open the metrics and keep POST /json closed.
import { createServer } from 'node:net';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { freePort } from '../support/ports.js';
import { runToExit, spawnTollgate, type TollgateProcess } from '../support/processes.js';
import { callCheck, d } from '../support/tollgate.js';

const RULES = `
domain: scraped
descriptors:
  - key: tenant
    rate_limit: {unit: minute, requests_per_unit: 5}
`;

describe('PROMETHEUS_ADDR, as Envoy Gateway sets it', () => {
  let tollgate: TollgateProcess;
  let metricsUrl: string;
  beforeAll(async () => {
    const port = await freePort();
    // Go's form for every interface, as in Envoy Gateway's pod spec.
    tollgate = await spawnTollgate(
      RULES,
      { USE_PROMETHEUS: 'true', PROMETHEUS_ADDR: `:${port}`, LOG_LEVEL: 'info' },
      { captureStdout: true },
    );
    metricsUrl = `http://127.0.0.1:${port}`;
  }, 30_000);
  afterAll(async () => {
    await tollgate?.stop();
  });

  it('serves the same series on that port as on the HTTP port', async () => {
    await callCheck(tollgate.client, { domain: 'scraped', descriptors: [d('tenant', 'acme')] });
    const scraped = await fetch(`${metricsUrl}/metrics`);
    expect(scraped.status).toBe(200);
    expect(scraped.headers.get('content-type')).toMatch(/^text\/plain/);
    const body = await scraped.text();
    expect(body).toMatch(/^ratelimit_service_rate_limit_total_hits\{[^}]*domain="scraped"/m);
    const names = (text: string) =>
      [...text.matchAll(/^# TYPE (\S+)/gm)].map((match) => match[1]).sort();
    const fromHttpPort = await (await fetch(`${tollgate.httpUrl}/metrics`)).text();
    expect(names(body)).toEqual(names(fromHttpPort));
  });

  it('answers nothing else there: no /json, no /rlconfig', async () => {
    const json = await fetch(`${metricsUrl}/json`, {
      method: 'POST',
      body: JSON.stringify({ domain: 'scraped', descriptors: [] }),
    });
    expect(json.status).toBe(404);
    expect((await fetch(`${metricsUrl}/rlconfig`)).status).toBe(404);
    expect((await fetch(`${metricsUrl}/metrics`, { method: 'POST' })).status).toBe(405);
  });

  it('says where the metrics are in its start-up line', () => {
    const listening = tollgate
      .stdout()
      .split('\n')
      .filter((line) => line.includes('"msg":"listening"'))
      .map((line) => JSON.parse(line) as { metrics?: string });
    expect(listening.map((line) => line.metrics)).toEqual([`:${new URL(metricsUrl).port}/metrics`]);
    expect(tollgate.stdout()).not.toMatch(/PROMETHEUS_ADDR is set but not used/);
  });
});

describe('PROMETHEUS_ADDR on a port that another process holds', () => {
  it('stops start-up with one line that names the setting', async () => {
    const holder = createServer();
    await new Promise<void>((resolve) => holder.listen(0, '127.0.0.1', resolve));
    const { port } = holder.address() as { port: number };
    try {
      const { code, stdout, stderr } = await runToExit(RULES, {
        PROMETHEUS_ADDR: `127.0.0.1:${port}`,
        LOG_LEVEL: 'silent',
      });
      expect(code).toBe(1);
      expect(`${stdout}${stderr}`).toContain(
        `PROMETHEUS_ADDR: 127.0.0.1:${port} is already in use by another process`,
      );
    } finally {
      holder.close();
    }
  });
});
