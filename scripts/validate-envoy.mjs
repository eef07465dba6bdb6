// `npm run validate:envoy [FILE.yaml...]`: checks Envoy bootstrap files (default envoy/envoy.yaml)
// against Envoy's own v3 API, with the Go validator in envoy/validate. Its output and exit code
// (0 valid, 1 invalid, 2 unreadable) pass through. The binary is built once per version of its
// sources into .cache/envoy-validate/<hash>/; `--print-binary` builds it and prints its path.
import { spawnSync } from 'node:child_process';
import { createHash } from 'node:crypto';
import { existsSync, mkdirSync, readdirSync, readFileSync, renameSync, rmSync } from 'node:fs';
import { basename, dirname, join, relative } from 'node:path';
import { fileURLToPath } from 'node:url';

const root = join(dirname(fileURLToPath(import.meta.url)), '..');
const sources = join(root, 'envoy', 'validate');

function fail(message) {
  console.error(`validate-envoy: ${message}`);
  process.exit(2);
}

/** Builds the validator unless a binary of the same sources is cached; returns its path. */
function buildValidator() {
  const go = spawnSync('go', ['version'], { encoding: 'utf8' });
  if (go.error || go.status !== 0) {
    fail(
      "Go 1.23 or newer is needed to validate envoy/envoy.yaml against Envoy's API: install it " +
        'from your distribution or https://go.dev/dl, then run npm test again',
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
  const dir = join(root, '.cache', 'envoy-validate', hash.digest('hex').slice(0, 16));
  const binary = join(dir, 'validate');
  if (existsSync(binary)) return binary;

  console.error("validate-envoy: building the validator (the first build fetches Envoy's API)");
  mkdirSync(dir, { recursive: true });
  // Built beside the final name, then renamed: a run that starts meanwhile never sees half a file.
  const partial = `${binary}.${process.pid}`;
  // -buildvcs=false: the VCS stamp adds nothing here, and fails in a clone git distrusts.
  const build = spawnSync('go', ['build', '-buildvcs=false', '-o', partial, '.'], {
    cwd: sources,
    stdio: ['ignore', 2, 2],
  });
  if (build.error || build.status !== 0) fail('go build in envoy/validate failed');
  renameSync(partial, binary);
  // Binaries of older sources are never run again.
  for (const old of readdirSync(dirname(dir))) {
    if (old !== basename(dir)) rmSync(join(dirname(dir), old), { recursive: true, force: true });
  }
  return binary;
}

const args = process.argv.slice(2);
const binary = buildValidator();
if (args[0] === '--print-binary') {
  console.log(binary);
} else {
  const files =
    args.length > 0 ? args : [relative(process.cwd(), join(root, 'envoy', 'envoy.yaml'))];
  const run = spawnSync(binary, files, { stdio: 'inherit' });
  if (run.error) fail(run.error.message);
  process.exit(run.status ?? 1);
}
