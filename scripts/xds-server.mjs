// `node scripts/xds-server.mjs --print-binary`: builds the tests' xDS management server, the Go
// program in test/xds/server, and prints the path of its binary. It is built once per version of
// its sources into .cache/xds-server/<hash>/; test/support/xdsServer.ts starts it. Any other
// arguments run the binary with them (e.g. `-port 18000`), its exit code passing through.
import { spawnSync } from 'node:child_process';
import { createHash } from 'node:crypto';
import { existsSync, mkdirSync, readdirSync, readFileSync, renameSync, rmSync } from 'node:fs';
import { basename, dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';

const root = join(dirname(fileURLToPath(import.meta.url)), '..');
const sources = join(root, 'test', 'xds', 'server');

function fail(message) {
  console.error(`xds-server: ${message}`);
  process.exit(2);
}

/** Builds the server unless a binary of the same sources is cached; returns its path. */
function buildServer() {
  const go = spawnSync('go', ['version'], { encoding: 'utf8' });
  if (go.error || go.status !== 0) {
    fail(
      "Go 1.25 or newer is needed to build the tests' xDS management server (test/xds/server): " +
        'install it from your distribution or https://go.dev/dl, then run the tests again',
    );
  }
  const hash = createHash('sha256');
  const files = readdirSync(sources).filter((name) => /^go\.(mod|sum)$|\.go$/.test(name));
  for (const name of files.sort()) {
    hash
      .update(`${name}\0`)
      .update(readFileSync(join(sources, name)))
      .update('\0');
  }
  const dir = join(root, '.cache', 'xds-server', hash.digest('hex').slice(0, 16));
  const binary = join(dir, 'xds-server');
  if (existsSync(binary)) return binary;

  console.error('xds-server: building the xDS server (the first build fetches its Go modules)');
  mkdirSync(dir, { recursive: true });
  // Built beside the final name, then renamed: a run that starts meanwhile never sees half a file.
  const partial = `${binary}.${process.pid}`;
  // -buildvcs=false: the VCS stamp adds nothing here, and fails in a clone git distrusts.
  const build = spawnSync('go', ['build', '-buildvcs=false', '-o', partial, '.'], {
    cwd: sources,
    stdio: ['ignore', 2, 2],
  });
  if (build.error || build.status !== 0) fail('go build in test/xds/server failed');
  renameSync(partial, binary);
  // Binaries of older sources are never run again.
  for (const old of readdirSync(dirname(dir))) {
    if (old !== basename(dir)) rmSync(join(dirname(dir), old), { recursive: true, force: true });
  }
  return binary;
}

const args = process.argv.slice(2);
const binary = buildServer();
if (args[0] === '--print-binary') {
  console.log(binary);
} else {
  const run = spawnSync(binary, args, { stdio: 'inherit' });
  if (run.error) fail(run.error.message);
  process.exit(run.status ?? 1);
}
