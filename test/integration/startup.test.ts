import { spawn } from 'node:child_process';
import { describe, expect, it } from 'vitest';
import { writeRules } from '../support/tollgate.js';

// A bad setting or a bad rules file stops the real entry point with exit code 1 and one line
// that names the setting, or the file, the path in it and the key.

function run(env: Record<string, string>): Promise<{ code: number | null; stderr: string }> {
  return new Promise((resolve) => {
    const child = spawn(process.execPath, ['dist/main.js'], {
      env: {
        ...process.env,
        GRPC_HOST: '127.0.0.1',
        GRPC_PORT: '0',
        HOST: '127.0.0.1',
        PORT: '0',
        ...env,
      },
      stdio: ['ignore', 'ignore', 'pipe'],
    });
    let stderr = '';
    child.stderr.on('data', (chunk: Buffer) => (stderr += chunk.toString()));
    child.once('exit', (code) => resolve({ code, stderr }));
  });
}

describe('start-up', () => {
  it('stops on a bad setting, naming it', async () => {
    expect(await run({ REDIS_TIMEOUT: 'soon' })).toEqual({
      code: 1,
      stderr: expect.stringMatching(/^tollgate: REDIS_TIMEOUT: 'soon' is not a duration/),
    });
  });

  it('stops on a bad rules file, naming the file, the path and the key', async () => {
    const path = writeRules(`
domain: api
descriptors:
  - key: tenant
    rate_limit: {unit: minutes, requests_per_unit: 5}
`);
    expect(await run({ CONFIG_PATH: path })).toEqual({
      code: 1,
      stderr:
        "tollgate: rules.yaml: descriptors[0].rate_limit.unit: 'minutes' is not one of " +
        'second, minute, hour, day, week, month, year\n',
    });
  });

  it('stops on a rule that misuses a reference key', async () => {
    const path = writeRules(`
domain: api
descriptors:
  - key: tenant
    value: acme
    share_threshold: true
    rate_limit: {unit: minute, requests_per_unit: 5}
`);
    const { code, stderr } = await run({ CONFIG_PATH: path });
    expect(code).toBe(1);
    expect(stderr).toMatch(/rules.yaml: descriptors\[0\].share_threshold: needs a wildcard value/);
  });
});
