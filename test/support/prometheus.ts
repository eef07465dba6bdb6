import { spawn } from 'node:child_process';
import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { stringify } from 'yaml';
import { freePort } from './ports.js';
import { eventually } from './tollgate.js';

/**
 * A real Prometheus (Debian's prometheus package, as CI installs it) that scrapes one target
 * every 2 s under the job `tollgate` and evaluates the given rule files.
 */
export interface TestPrometheus {
  /** An instant query's series, e.g. `[{ metric: { kind: 'timeout' }, value: [t, '0.5'] }]`. */
  query(expr: string): Promise<{ metric: Record<string, string>; value: [number, string] }[]>;
  /** Every loaded rule, by name, with its health once evaluated ('ok', 'err' or 'unknown'). */
  rules(): Promise<{ name: string; health: string; lastError?: string }[]>;
  stop(): Promise<void>;
}

/** Without the package the tests fail and say so: CI installs it. */
export const notInstalled = (command: string): Error =>
  new Error(
    `${command} is not installed: install Debian's prometheus package ` +
      '(apt-get install -y --no-install-recommends prometheus), which provides it',
  );

export async function startPrometheus(
  target: string,
  ruleFiles: string[],
): Promise<TestPrometheus> {
  const dir = mkdtempSync(join(tmpdir(), 'tollgate-prometheus-'));
  const config = join(dir, 'prometheus.yml');
  writeFileSync(
    config,
    stringify({
      global: { scrape_interval: '2s', scrape_timeout: '2s', evaluation_interval: '2s' },
      rule_files: ruleFiles,
      scrape_configs: [{ job_name: 'tollgate', static_configs: [{ targets: [target] }] }],
    }),
  );
  const url = `http://127.0.0.1:${await freePort()}`;
  const child = spawn(
    'prometheus',
    [
      `--config.file=${config}`,
      `--storage.tsdb.path=${join(dir, 'data')}`,
      `--web.listen-address=${url.slice('http://'.length)}`,
    ],
    { stdio: ['ignore', 'ignore', 'pipe'] },
  );
  let stderr = '';
  child.stderr.on('data', (chunk: Buffer) => (stderr += chunk.toString()));
  const failed = new Promise<never>((_, reject) => {
    child.once('error', (error: NodeJS.ErrnoException) =>
      reject(error.code === 'ENOENT' ? notInstalled('prometheus') : error),
    );
    child.once('exit', (code) => reject(new Error(`prometheus exited with ${code}: ${stderr}`)));
  });
  failed.catch(() => {});
  await Promise.race([failed, eventually(async () => (await fetch(`${url}/-/ready`)).ok, 30_000)]);

  const api = async <T>(path: string): Promise<T> => {
    const reply = (await (await fetch(`${url}/api/v1/${path}`)).json()) as {
      status: string;
      data: T;
      error?: string;
    };
    if (reply.status !== 'success') throw new Error(`${path}: ${reply.error}`);
    return reply.data;
  };
  return {
    query: async (expr) =>
      (await api<{ result: [] }>(`query?query=${encodeURIComponent(expr)}`)).result,
    rules: async () =>
      (
        await api<{ groups: { rules: { name: string; health: string; lastError?: string }[] }[] }>(
          'rules',
        )
      ).groups.flatMap((group) => group.rules),
    stop: async () => {
      if (child.exitCode !== null || child.signalCode !== null) return;
      child.removeAllListeners('exit');
      await new Promise<void>((resolve) => {
        child.once('exit', () => resolve());
        child.kill('SIGTERM');
      });
    },
  };
}
