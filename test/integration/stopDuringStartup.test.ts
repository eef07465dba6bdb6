import { spawn } from 'node:child_process';
import { describe, expect, it } from 'vitest';
import { freePort } from '../support/ports.js';
import { eventually } from '../support/tollgate.js';

// While tollgate waits for its first rules from an xDS server that refuses, it keeps waiting and
// retrying; before, it exited with status 13 right after the first refusal (Node's unsettled
// top-level await), since nothing it waited on held the process open. A SIGTERM then ends it with
// status 0 and a log line, as a stop that was asked for; before, Node's default ended it by the
// signal, as it did any tollgate stopped right as its gRPC port opened.

describe('start-up that waits for the first xDS rules', () => {
  it('goes on after a refusal, and a SIGTERM ends it with status 0, saying so', async () => {
    const run = await startTollgate([], {
      CONFIG_TYPE: 'GRPC_XDS_SOTW',
      // Where nothing listens, so the first rules never come.
      CONFIG_GRPC_XDS_SERVER_URL: '127.0.0.1:1',
    });
    const { child } = run;
    await eventually(async () => run.output().includes('xds stream lost'), 15_000);
    // The refusal's retry is 3 s away; the process lives meanwhile.
    await new Promise((resolve) => setTimeout(resolve, 1_000));
    expect(child.exitCode, run.output()).toBeNull();

    child.kill('SIGTERM');
    const ended = await run.exit(10_000);
    const output = run.output();
    expect(ended, output).toEqual({ code: 0, signal: null });
    expect(output).toMatch(/"signal":"SIGTERM".*"msg":"stopped during start-up"/);
  });

  it('drains on a SIGTERM that arrives in the turn that ends start-up, rather than losing it', async () => {
    // The signal is sent from inside tollgate as it logs `listening`; the turn goes on to end
    // start-up. Before, the process then ran on with no listener for it, until killed.
    const run = await startTollgate(
      ['--import', './test/fixtures/signals/termOnListening.mjs'],
      {},
    );
    const ended = await run.exit(20_000);
    const output = run.output();
    expect(ended, output).toEqual({ code: 0, signal: null });
    expect(output).toContain('"msg":"listening"');
    expect(output).toMatch(/"signal":"SIGTERM".*"msg":"draining"/);
  }, 30_000);
});

/**
 * tollgate from dist/, on free ports and the in-memory store, with `env` over the rest; `exit`
 * waits for it to end, killing it after `killAfterMs`.
 */
async function startTollgate(nodeFlags: string[], env: Record<string, string>) {
  const child = spawn(process.execPath, [...nodeFlags, 'dist/main.js'], {
    env: {
      ...process.env,
      GRPC_HOST: '127.0.0.1',
      GRPC_PORT: String(await freePort()),
      HOST: '127.0.0.1',
      PORT: String(await freePort()),
      LOG_LEVEL: 'info',
      REDIS_URL: '',
      ...env,
    },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let output = '';
  child.stdout.on('data', (chunk: Buffer) => (output += chunk.toString()));
  child.stderr.on('data', (chunk: Buffer) => (output += chunk.toString()));
  const exited = new Promise<{ code: number | null; signal: string | null }>((resolve) =>
    child.once('exit', (code, signal) => resolve({ code, signal })),
  );
  return {
    child,
    output: () => output,
    async exit(killAfterMs: number) {
      const hung = setTimeout(() => child.kill('SIGKILL'), killAfterMs);
      const ended = await exited;
      clearTimeout(hung);
      return ended;
    },
  };
}
