import { spawn, type ChildProcess } from 'node:child_process';
import { createRateLimitClient, type RateLimitClient } from '../../src/grpc/protos.js';
import { freePort } from './redis.js';
import { eventually, healthStatus, writeRules } from './tollgate.js';

/** tollgate as its own process, started from the built entry point like `npm start` does. */
export interface TollgateProcess {
  address: string;
  client: RateLimitClient;
  child: ChildProcess;
  /** Everything it wrote to stderr, for failure messages. */
  stderr(): string;
  stop(): Promise<number | null>;
}

export async function spawnTollgate(
  rules: string,
  env: Record<string, string>,
): Promise<TollgateProcess> {
  const port = await freePort();
  const child = spawn(process.execPath, ['dist/main.js'], {
    env: {
      ...process.env,
      CONFIG_PATH: writeRules(rules),
      GRPC_HOST: '127.0.0.1',
      GRPC_PORT: String(port),
      HOST: '127.0.0.1',
      PORT: String(await freePort()),
      LOG_LEVEL: 'warn',
      ...env,
    },
    stdio: ['ignore', 'ignore', 'pipe'],
  });
  let stderr = '';
  child.stderr?.on('data', (chunk: Buffer) => (stderr += chunk.toString()));
  const address = `127.0.0.1:${port}`;
  await eventually(async () => (await healthStatus(address)) === 'SERVING', 15_000).catch(() => {
    throw new Error(`tollgate on ${address} did not become healthy: ${stderr}`);
  });
  const client = createRateLimitClient(address);
  return {
    address,
    client,
    child,
    stderr: () => stderr,
    stop: () =>
      new Promise((resolve) => {
        client.close();
        if (child.exitCode !== null || child.signalCode !== null) return resolve(child.exitCode);
        child.once('exit', (code) => resolve(code));
        child.kill('SIGTERM');
      }),
  };
}
