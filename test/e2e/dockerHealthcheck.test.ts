// docker/healthcheck.mjs, the image's HEALTHCHECK, run as Docker runs it: with the container's
// environment, against a real service on a port that is not the default.
import { spawn } from 'node:child_process';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { freePort } from '../support/ports.js';
import { startTollgate, type Tollgate } from '../support/tollgate.js';

function healthcheck(
  env: Record<string, string>,
): Promise<{ code: number | null; stderr: string }> {
  const child = spawn(process.execPath, ['docker/healthcheck.mjs'], {
    env: { PATH: process.env.PATH ?? '', ...env },
    stdio: ['ignore', 'ignore', 'pipe'],
  });
  let stderr = '';
  child.stderr.on('data', (chunk: Buffer) => (stderr += chunk.toString()));
  return new Promise((resolve) => child.once('close', (code) => resolve({ code, stderr })));
}

describe("the image's health check", () => {
  let tollgate: Tollgate;
  beforeAll(async () => {
    tollgate = await startTollgate({ rules: 'domain: api\ndescriptors: []\n' });
  });
  afterAll(() => tollgate?.stop());

  it('asks /healthcheck on the PORT and HOST the service was given', async () => {
    const { hostname, port } = new URL(tollgate.httpUrl);
    expect(await healthcheck({ HOST: hostname, PORT: port })).toEqual({ code: 0, stderr: '' });
    // A wildcard address is reached through loopback.
    expect(await healthcheck({ HOST: '0.0.0.0', PORT: port })).toEqual({ code: 0, stderr: '' });
  });

  it('fails, naming the URL, when nothing answers there', async () => {
    const port = String(await freePort());
    const run = await healthcheck({ PORT: port });
    expect(run.code).toBe(1);
    expect(run.stderr).toContain(`http://127.0.0.1:${port}/healthcheck`);
  });
});
