import { writeFileSync } from 'node:fs';
import { afterAll, describe, expect, it } from 'vitest';
import { probeCalls } from '../support/probeCalls.js';
import { freePort } from '../support/ports.js';
import { httpFlood } from '../support/httpFlood.js';
import { spawnTollgate, type TollgateProcess } from '../support/processes.js';
import { callCheck, d, eventually, writeRules } from '../support/tollgate.js';

// GET /rlconfig rebuilt its dump on every request: four clients asking for the dump of a large
// rules file in a loop held the event loop for hundreds of milliseconds at a time, and checks
// waited as long. Now the dump is built once per rules version, in pieces, and shared.

/** The dump of a large rules file (1.5 MB), and the probe's rule, whose limit tells its version. */
const TENANTS = 20_000;
const bigRules = (probeLimit: number) =>
  `domain: api
descriptors:
  - {key: tenant, value: probe, rate_limit: {unit: hour, requests_per_unit: ${probeLimit}}}
  - key: tenant
    rate_limit: {unit: hour, requests_per_unit: 1000000}
` +
  Array.from(
    { length: TENANTS },
    (_, i) =>
      `  - {key: tenant, value: t${i}, rate_limit: {unit: second, requests_per_unit: 10}}\n`,
  ).join('');

const SMALL = `
domain: api
descriptors:
  - key: tenant
    rate_limit: {unit: hour, requests_per_unit: 1000000}
`;

const started: TollgateProcess[] = [];
afterAll(async () => {
  for (const tollgate of started) await tollgate.stop();
});

async function spawn(rules: string, env: Record<string, string>) {
  const tollgate = await spawnTollgate(rules, env, { captureStdout: true });
  started.push(tollgate);
  return tollgate;
}

const builds = (tollgate: TollgateProcess) =>
  tollgate.stdout().match(/"msg":"rules dump built for \/rlconfig"/g)?.length ?? 0;

describe('GET /rlconfig of a large rules file, from 4 clients at once', () => {
  it('builds the dump once per version, and checks keep their latency', async () => {
    const rulesPath = writeRules(bigRules(100));
    const tollgate = await spawn(bigRules(100), {
      CONFIG_PATH: rulesPath,
      CONFIG_POLL_INTERVAL: '200ms',
      LOG_LEVEL: 'info',
    });
    const first = await fetch(`${tollgate.httpUrl}/rlconfig`);
    const dump = await first.text();
    expect(first.status).toBe(200);
    expect(dump.split('\n').filter((line) => line.startsWith('api.tenant_t'))).toHaveLength(
      TENANTS,
    );

    const quiet = probeCalls(tollgate);
    await new Promise((resolve) => setTimeout(resolve, 2_000));
    const baseline = await quiet.stop();
    const probe = probeCalls(tollgate);
    const answers = await httpFlood(`${tollgate.httpUrl}/rlconfig`, 4, 3_000);
    const result = await probe.stop();
    const dumps = Object.values(answers).reduce((sum, n) => sum + n, 0);
    console.log(
      `[rlconfig] ${dumps} dumps of ${(dump.length / 1e6).toFixed(1)} MB in 3 s; ` +
        `${result.calls} checks, ${result.failed} failed, ` +
        `p50 ${result.p50Ms.toFixed(1)} ms, p99 ${result.p99Ms.toFixed(1)} ms ` +
        `(alone: p50 ${baseline.p50Ms.toFixed(1)} ms, p99 ${baseline.p99Ms.toFixed(1)} ms)`,
    );
    expect(Object.keys(answers)).toEqual([`200 ${Buffer.byteLength(dump)}`]);
    expect(result.failed).toBe(0);
    // Rebuilt per request, p99 was 500–800 ms here; on a busy machine, 70 ms with no dumps at all.
    expect(result.p99Ms).toBeLessThan(250);
    expect(builds(tollgate)).toBe(1);

    // A reload is a new version: its dump shows the new limit, built once more.
    writeFileSync(rulesPath, bigRules(77));
    await eventually(async () => {
      const response = await callCheck(tollgate.client, {
        domain: 'api',
        descriptors: [d('tenant', 'probe')],
      });
      return response.statuses?.[0]?.current_limit?.requests_per_unit === 77;
    }, 20_000);
    const after = await Promise.all(
      Array.from({ length: 3 }, async () => (await fetch(`${tollgate.httpUrl}/rlconfig`)).text()),
    );
    for (const text of after) {
      expect(text).toContain('api.tenant_probe: unit=HOUR requests_per_unit=77');
    }
    expect(builds(tollgate)).toBe(2);
  }, 90_000);
});

describe('RLCONFIG', () => {
  it('off: /rlconfig is 404', async () => {
    const tollgate = await spawn(SMALL, { RLCONFIG: 'off' });
    const response = await fetch(`${tollgate.httpUrl}/rlconfig`);
    expect(response.status).toBe(404);
    expect((await fetch(`${tollgate.httpUrl}/healthcheck`)).status).toBe(200);
  }, 30_000);

  it('debug: /rlconfig is on DEBUG_PORT alone, which serves nothing else', async () => {
    const debugPort = await freePort();
    const tollgate = await spawn(SMALL, {
      RLCONFIG: 'debug',
      DEBUG_HOST: '127.0.0.1',
      DEBUG_PORT: String(debugPort),
      LOG_LEVEL: 'info',
    });
    const debug = `http://127.0.0.1:${debugPort}`;
    const response = await fetch(`${debug}/rlconfig`);
    expect([response.status, await response.text()]).toEqual([
      200,
      'api.tenant: unit=HOUR requests_per_unit=1000000, algorithm=sliding_window, shadow_mode: false\n',
    ]);
    expect((await fetch(`${tollgate.httpUrl}/rlconfig`)).status).toBe(404);
    expect((await fetch(`${debug}/metrics`)).status).toBe(404);
    expect((await fetch(`${debug}/json`, { method: 'POST', body: '{}' })).status).toBe(404);
    expect(tollgate.stdout()).toContain(`"rlconfig":"127.0.0.1:${debugPort}/rlconfig"`);
  }, 30_000);
});
