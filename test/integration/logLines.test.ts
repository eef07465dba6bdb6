import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { afterEach, describe, expect, it } from 'vitest';
import { freePort } from '../support/ports.js';
import { spawnTollgate, type TollgateProcess } from '../support/processes.js';

// Every warning and error the real service writes is one line in LOG_FORMAT, with its reason and
// without a stack (stacks at LOG_LEVEL=debug only), and nothing reaches stdout or stderr around
// the logger: not Node's process warnings, not grpc-js's. Here the service meets what used to
// print stacks: an xDS server that refuses, a statsd server that refuses, and a process warning
// (which a library may emit at any time; a module loaded with --import emits one).

let tollgate: TollgateProcess | undefined;
afterEach(async () => {
  await tollgate?.stop();
  tollgate = undefined;
});

/** A module that emits a process warning half a second after the service starts loading. */
function warningModule(): string {
  const path = join(mkdtempSync(join(tmpdir(), 'tollgate-warning-')), 'warn.mjs');
  writeFileSync(
    path,
    "setTimeout(() => process.emitWarning('a library is unhappy', { code: 'TG_TEST_WARNING' }), 500);\n",
  );
  return path;
}

/** What the service wrote in about 4 s of refused xDS and statsd connections, line by line. */
async function linesOf(env: Record<string, string>): Promise<string[]> {
  const closed = await freePort();
  tollgate = await spawnTollgate(
    '',
    {
      CONFIG_TYPE: 'GRPC_XDS_SOTW',
      CONFIG_GRPC_XDS_SERVER_URL: `127.0.0.1:${closed}`,
      FORCE_START_WITHOUT_INITIAL_CONFIG: 'true',
      USE_STATSD: 'true',
      STATSD_HOST: '127.0.0.1',
      STATSD_PORT: String(closed),
      STATS_FLUSH_INTERVAL: '200ms',
      NODE_OPTIONS: `--import ${warningModule()}`,
      ...env,
    },
    { captureStdout: true, anyHealth: true },
  );
  // The xDS client retries every 3 s: two refusals, and statsd's, and the warning.
  await sleep(4_000);
  await tollgate.stop();
  const text = tollgate.stdout() + tollgate.stderr();
  return text.split('\n').filter((line) => line !== '');
}

const XDS_LOST = 'xds stream lost; serving the rules in force and reconnecting';
const STATSD_FAILED = 'statsd: sending stats failed; they are dropped meanwhile';

describe('log lines', () => {
  it('LOG_FORMAT=json: each line is one JSON object with a short reason and no stack', async () => {
    const lines = await linesOf({ LOG_FORMAT: 'json' });
    const logs = lines.map((line) => JSON.parse(line) as Record<string, unknown>);
    for (const line of lines) {
      expect(line).not.toMatch(/"stack"|\\n\s+at |Resolution note/);
    }
    const messages = logs.map((log) => log.msg);
    expect(messages).toContain(XDS_LOST);
    expect(messages).toContain(STATSD_FAILED);
    expect(logs.find((log) => log.msg === XDS_LOST)?.err).toEqual({
      type: 'Error',
      message: expect.stringMatching(/^14 UNAVAILABLE: .*ECONNREFUSED 127\.0\.0\.1:\d+$/),
      code: 14,
    });
    expect(logs.find((log) => log.msg === STATSD_FAILED)?.err).toMatchObject({
      code: 'ECONNREFUSED',
    });
    expect(logs.find((log) => log.msg === 'process warning')).toMatchObject({
      level: 40,
      err: { type: 'Warning', message: 'a library is unhappy', code: 'TG_TEST_WARNING' },
    });
  });

  it('LOG_LEVEL=debug: the same lines carry the stack', async () => {
    const lines = await linesOf({ LOG_FORMAT: 'json', LOG_LEVEL: 'debug' });
    const logs = lines.map(
      (line) => JSON.parse(line) as { msg?: string; err?: { stack?: string } },
    );
    expect(logs.find((log) => log.msg === XDS_LOST)?.err?.stack).toMatch(/\n\s+at /);
    expect(logs.find((log) => log.msg === 'process warning')?.err?.stack).toMatch(/\n\s+at /);
  });

  it('LOG_FORMAT=text: each event is one readable line, the error on it', async () => {
    const lines = await linesOf({ LOG_FORMAT: 'text' });
    for (const line of lines) {
      expect(line).toMatch(/^\[\d\d:\d\d:\d\d\.\d{3}\] (INFO|WARN|ERROR): \S/);
      expect(line).not.toMatch(/"stack"|Resolution note/);
    }
    expect(lines).toContainEqual(
      expect.stringMatching(/WARN: process warning err=\{.*"code":"TG_TEST_WARNING"\}$/),
    );
    expect(lines).toContainEqual(
      expect.stringMatching(/WARN: xds stream lost; .* err=\{.*ECONNREFUSED.*\} \{"server":/),
    );
  });
});
