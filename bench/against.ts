import { spawnSync } from 'node:child_process';
import { existsSync, mkdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import type { AgainstBuild } from './versus.js';

/**
 * `--against GIT_REF`: another revision of tollgate, measured beside the working tree in the same
 * run, so that a change's cost shows before it lands. The revision is exported with `git archive`
 * into .cache/against/SHA/ (no worktree, so nothing outside .cache/ to clean up), given its
 * dependencies and built there, once per commit.
 */

/**
 * A revision as the command line names it: a branch, a tag, a commit or an expression such as
 * `main~3`. Refused: anything git could read as an option, and blanks or control characters.
 */
export function parseAgainstRef(ref: string): string {
  const control = [...ref].some((char) => char.charCodeAt(0) < 0x20 || char === '\x7f');
  if (ref === '' || ref.startsWith('-') || /\s/.test(ref) || control) {
    throw new Error(`--against: '${ref}' is not a git revision`);
  }
  return ref;
}

/** `tollgate@` and the short commit, as the report names the service. */
export function againstName(sha: string): AgainstBuild['name'] {
  if (!/^[0-9a-f]{40}([0-9a-f]{24})?$/.test(sha)) throw new Error(`not a commit id: ${sha}`);
  return `tollgate@${sha.slice(0, 7)}`;
}

export function againstDir(repoRoot: string, sha: string): string {
  return join(repoRoot, '.cache', 'against', sha);
}

/** Written last, so a build that stopped half-way is started again rather than used. */
const READY = '.bench-ready';

function run(command: string, args: string[], cwd: string): string {
  const result = spawnSync(command, args, {
    cwd,
    encoding: 'utf8',
    stdio: ['ignore', 'pipe', 'inherit'],
    maxBuffer: 64 * 2 ** 20,
  });
  if (result.error || result.status !== 0) {
    throw new Error(`--against: ${command} ${args.join(' ')} failed`);
  }
  return result.stdout.trim();
}

/**
 * The working tree's node_modules, linked file by file (`cp -al`, no copy of the bytes) when the
 * revision locks the same dependencies; `npm ci` otherwise.
 */
function installDependencies(repoRoot: string, root: string): void {
  const lock = (dir: string) => {
    const path = join(dir, 'package-lock.json');
    return existsSync(path) ? readFileSync(path, 'utf8') : undefined;
  };
  const mine = lock(repoRoot);
  if (mine !== undefined && mine === lock(root) && existsSync(join(repoRoot, 'node_modules'))) {
    const linked = spawnSync(
      'cp',
      ['-al', join(repoRoot, 'node_modules'), join(root, 'node_modules')],
      {
        stdio: ['ignore', 'ignore', 'inherit'],
      },
    );
    if (linked.status === 0) return;
    rmSync(join(root, 'node_modules'), { recursive: true, force: true });
  }
  run('npm', ['ci', '--prefer-offline', '--no-audit', '--no-fund'], root);
}

export function buildAgainst(repoRoot: string, ref: string): AgainstBuild {
  const sha = run(
    'git',
    ['rev-parse', '--verify', '--end-of-options', `${ref}^{commit}`],
    repoRoot,
  );
  const root = againstDir(repoRoot, sha);
  const build = { name: againstName(sha), ref, sha, root };
  if (existsSync(join(root, READY))) return build;
  console.error(`bench: building ${ref} (${sha.slice(0, 12)}) into ${root}`);
  rmSync(root, { recursive: true, force: true });
  mkdirSync(root, { recursive: true });
  const archive = `${root}.tar`;
  try {
    run('git', ['archive', '--format=tar', `--output=${archive}`, sha], repoRoot);
    run('tar', ['-xf', archive, '-C', root], repoRoot);
  } finally {
    rmSync(archive, { force: true });
  }
  installDependencies(repoRoot, root);
  run('npm', ['run', 'build'], root);
  writeFileSync(join(root, READY), `${sha}\n`);
  return build;
}
