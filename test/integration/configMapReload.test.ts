import { mkdirSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { publishConfigMap } from '../support/configMap.js';
import { spawnTollgate, type TollgateProcess } from '../support/processes.js';
import { callCheck, d, eventually } from '../support/tollgate.js';

// The Helm chart (deploy/helm/tollgate) mounts the rules' ConfigMap as a directory and points
// CONFIG_PATH at it. This runs `node dist/main.js` as the pod does, on such a directory, and
// swaps it as the kubelet does when the ConfigMap is edited: the new limits must apply, with no
// restart and no SIGHUP.

const rules = (domain: string, requestsPerUnit: number): string => `
domain: ${domain}
descriptors:
  - key: tenant
    rate_limit: {unit: minute, requests_per_unit: ${requestsPerUnit}}
`;

let dir: string;
let tollgate: TollgateProcess;

beforeAll(async () => {
  dir = join(mkdtempSync(join(tmpdir(), 'tollgate-configmap-')), 'rules');
  mkdirSync(dir);
  publishConfigMap(dir, { 'config.yaml': rules('api', 1) });
  tollgate = await spawnTollgate('', { CONFIG_PATH: dir }, { captureStdout: true });
});

afterAll(async () => {
  await tollgate?.stop();
  rmSync(join(dir, '..'), { recursive: true, force: true });
});

/** The overall codes of `calls` checks, one after another, of one tenant in `domain`. */
async function overallCodes(domain: string, tenant: string, calls: number): Promise<string[]> {
  const answers: string[] = [];
  for (let i = 0; i < calls; i++) {
    const response = await callCheck(tollgate.client, {
      domain,
      descriptors: [d('tenant', tenant)],
    });
    answers.push(response.overall_code ?? '');
  }
  return answers;
}

/** The limit a check in `domain` reports, or undefined without a rule. */
async function limitIn(domain: string): Promise<number | undefined> {
  const response = await callCheck(tollgate.client, {
    domain,
    descriptors: [d('tenant', 'probe')],
  });
  return response.statuses?.[0]?.current_limit?.requests_per_unit;
}

describe('a ConfigMap directory, swapped as the kubelet swaps it', () => {
  it('serves the first rules', async () => {
    expect(await overallCodes('api', 'first', 2)).toEqual(['OK', 'OVER_LIMIT']);
  });

  it('applies an edited file and a new one, without a restart', async () => {
    publishConfigMap(dir, { 'config.yaml': rules('api', 3), 'billing.yaml': rules('billing', 2) });
    await eventually(async () => (await limitIn('api')) === 3, 20_000);
    expect(await overallCodes('api', 'second', 4)).toEqual(['OK', 'OK', 'OK', 'OVER_LIMIT']);
    expect(await overallCodes('billing', 'second', 3)).toEqual(['OK', 'OK', 'OVER_LIMIT']);
  }, 30_000);

  it('drops the domain of a key removed from the ConfigMap', async () => {
    publishConfigMap(dir, { 'config.yaml': rules('api', 3) });
    await eventually(async () => (await limitIn('billing')) === undefined, 20_000);
    expect(await limitIn('api')).toBe(3);
    expect(tollgate.child.exitCode).toBeNull();
  }, 30_000);

  it('logs a broken file in one line naming it and the fault, with no stack, and keeps serving', async () => {
    publishConfigMap(dir, {
      'config.yaml':
        'domain: api\ndescriptors:\n  - key: tenant\n    rate_limit: {unit: minutes, requests_per_unit: 9}\n',
    });
    const failed = 'rules reload failed; the previous rules stay in force';
    const refusals = () =>
      tollgate
        .stdout()
        .split('\n')
        .filter((line) => line.includes(failed));
    await eventually(async () => refusals().length > 0, 20_000);
    expect(refusals().map((line) => JSON.parse(line) as unknown)).toEqual([
      {
        level: 50,
        time: expect.any(Number),
        service: 'tollgate',
        configPath: dir,
        reason:
          "config.yaml: descriptors[0].rate_limit.unit: 'minutes' is not one of second, minute, hour, day, week, month, year",
        msg: failed,
      },
    ]);
    expect(await limitIn('api')).toBe(3);

    publishConfigMap(dir, { 'config.yaml': rules('api', 4) });
    await eventually(async () => (await limitIn('api')) === 4, 20_000);
  }, 30_000);
});
