// Builds a Go program of this repository once per version of its sources, into
// .cache/<name>/<hash>/<name>, and returns the binary's path: the Envoy validator, the Kubernetes
// manifests' checker and the tests' xDS management server are built this way. installOnce does
// the same for a published Go command at a pinned version (helm).
import { spawnSync } from 'node:child_process';
import { createHash } from 'node:crypto';
import { existsSync, mkdirSync, readdirSync, readFileSync, renameSync, rmSync } from 'node:fs';
import { basename, dirname, join, relative } from 'node:path';
import { fileURLToPath } from 'node:url';

export const root = join(dirname(fileURLToPath(import.meta.url)), '..');

function requireGo(what, needs, fail) {
  const go = spawnSync('go', ['version'], { encoding: 'utf8' });
  if (go.error || go.status !== 0) {
    fail(
      `Go ${needs} or newer is needed to build ${what}: install it from your distribution or ` +
        'https://go.dev/dl, then run the command again',
    );
  }
}

/** Moves a finished build into place, and removes the older builds beside it, never run again. */
function publish(partial, binary) {
  renameSync(partial, binary);
  const dir = dirname(binary);
  for (const old of readdirSync(dirname(dir))) {
    if (old !== basename(dir)) rmSync(join(dirname(dir), old), { recursive: true, force: true });
  }
  return binary;
}

/**
 * `name`: the cache folder's name, and the prefix of messages; `file`: the binary's name (`name`
 * by default); `sources`: the Go module's folder; `what`: what it is, for the messages; `needs`:
 * the Go version it needs; `fail(message)`: reports and exits.
 */
export function buildOnce({ name, file = name, sources, what, needs, fail }) {
  requireGo(what, needs, fail);
  const hash = createHash('sha256');
  const files = readdirSync(sources).filter((file) => /^go\.(mod|sum)$|\.go$/.test(file));
  for (const file of files.sort()) {
    hash
      .update(`${file}\0`)
      .update(readFileSync(join(sources, file)))
      .update('\0');
  }
  const dir = join(root, '.cache', name, hash.digest('hex').slice(0, 16));
  const binary = join(dir, file);
  if (existsSync(binary)) return binary;

  console.error(`${name}: building ${what} (the first build fetches its Go modules)`);
  mkdirSync(dir, { recursive: true });
  // Built beside the final name, then renamed: a run that starts meanwhile never sees half a file.
  const partial = `${binary}.${process.pid}`;
  // -buildvcs=false: the VCS stamp adds nothing here, and fails in a clone git distrusts.
  const build = spawnSync('go', ['build', '-buildvcs=false', '-o', partial, '.'], {
    cwd: sources,
    stdio: ['ignore', 2, 2],
  });
  if (build.error || build.status !== 0) fail(`go build in ${relative(root, sources)} failed`);
  return publish(partial, binary);
}

/**
 * `go install PKG@VERSION` once, into .cache/<name>/<version>/<file>, and returns the binary's
 * path; `ldflags` are passed to the build (a version stamp). The other options are buildOnce's.
 */
export function installOnce({ name, file = name, pkg, version, ldflags = '', what, needs, fail }) {
  requireGo(what, needs, fail);
  const dir = join(root, '.cache', name, version);
  const binary = join(dir, file);
  if (existsSync(binary)) return binary;

  console.error(
    `${name}: installing ${what}, ${pkg}@${version} (the first time fetches its modules)`,
  );
  // Installed into a folder of its own, then renamed into place, as buildOnce does.
  const partialDir = join(dir, `.partial-${process.pid}`);
  mkdirSync(partialDir, { recursive: true });
  const install = spawnSync(
    'go',
    ['install', '-buildvcs=false', `-ldflags=${ldflags}`, `${pkg}@${version}`],
    {
      cwd: root,
      env: { ...process.env, GOBIN: partialDir },
      stdio: ['ignore', 2, 2],
    },
  );
  if (install.error || install.status !== 0) fail(`go install ${pkg}@${version} failed`);
  publish(join(partialDir, file), binary);
  rmSync(partialDir, { recursive: true, force: true });
  return binary;
}

/**
 * The command line of a script that builds a Go tool: `--print-binary` prints the binary's path;
 * other arguments run the binary with them, its exit code passing through.
 */
export function printOrRun(binary, args, fail) {
  if (args[0] === '--print-binary') {
    console.log(binary);
    return;
  }
  const run = spawnSync(binary, args, { stdio: 'inherit' });
  if (run.error) fail(run.error.message);
  process.exit(run.status ?? 1);
}
