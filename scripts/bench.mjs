// `npm run bench [-- --quick] [--out NAME] [--workers N]`: takes ghz from PATH, or else installs it
// (once per version, into .cache/ghz/), and installs envoyproxy/ratelimit's server (into .cache/reference/, by scripts/reference.sh),
// builds dist/ and the harness in bench/ (into .cache/bench/), then runs it. The harness starts
// Redis, tollgate, the reference and the bare server itself, and stops them when it ends.
import { spawn, spawnSync } from 'node:child_process';
import { existsSync, mkdirSync, symlinkSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';

const GHZ_VERSION = 'v0.121.0';
const root = join(dirname(fileURLToPath(import.meta.url)), '..');

function fail(message) {
  console.error(`bench: ${message}`);
  process.exit(2);
}

function run(command, args, options = {}) {
  const result = spawnSync(command, args, { cwd: root, stdio: ['ignore', 2, 2], ...options });
  if (result.error || result.status !== 0) fail(`${command} ${args.join(' ')} failed`);
}

/** The ghz to drive load with, and its version as the results record it. */
function findGhz() {
  // One on PATH is used as it is; builds from source call themselves "dev".
  const onPath = spawnSync('ghz', ['--version'], { encoding: 'utf8' });
  if (!onPath.error && onPath.status === 0) {
    return { binary: 'ghz', version: `${onPath.stdout.trim() || 'unknown'} (ghz on PATH)` };
  }
  const dir = join(root, '.cache', 'ghz', GHZ_VERSION);
  const binary = join(dir, 'ghz');
  if (existsSync(binary)) return { binary, version: GHZ_VERSION };
  const go = spawnSync('go', ['version'], { encoding: 'utf8' });
  if (go.error || go.status !== 0) {
    fail(
      `the bench drives load with ghz, which is not on PATH, and Go, which would build ghz ` +
        `${GHZ_VERSION} from source, is not on PATH either: install ghz or Go (https://go.dev/dl)`,
    );
  }
  console.error(`bench: installing ghz ${GHZ_VERSION} into ${dir}`);
  mkdirSync(dir, { recursive: true });
  run('go', ['install', `github.com/bojand/ghz/cmd/ghz@${GHZ_VERSION}`], {
    env: { ...process.env, GOBIN: dir },
  });
  return { binary, version: GHZ_VERSION };
}

function build() {
  run(process.execPath, [join(root, 'scripts', 'build.mjs')]);
  const tsc = join(root, 'node_modules', 'typescript', 'bin', 'tsc');
  run(process.execPath, [tsc, '-p', 'bench/tsconfig.json']);
  // The harness compiles the src/ modules it imports to .cache/bench/src/, and they find proto/
  // (and lua/, config/, package.json) two levels up, as dist/ does: link those in.
  for (const name of ['proto', 'lua', 'config', 'package.json']) {
    const link = join(root, '.cache', 'bench', name);
    if (!existsSync(link)) symlinkSync(join('..', '..', name), link);
  }
}

if (spawnSync('redis-server', ['--version']).status !== 0) {
  fail('the bench needs redis-server on PATH (Debian: apt-get install -y redis-server)');
}
const ghz = findGhz();
// envoyproxy/ratelimit's server, which the bench compares tollgate with (once, into .cache/).
run('bash', [join(root, 'scripts', 'reference.sh')]);
build();

const args = process.argv.slice(2);
const child = spawn(process.execPath, [join(root, '.cache', 'bench', 'bench', 'run.js'), ...args], {
  cwd: root,
  stdio: 'inherit',
  env: {
    ...process.env,
    BENCH_GHZ: ghz.binary,
    BENCH_GHZ_VERSION: ghz.version,
    BENCH_COMMAND: ['npm run bench', ...(args.length ? ['--', ...args] : [])].join(' '),
  },
});
// Ctrl-C reaches the harness directly (same process group); it stops what it started and exits.
// Here, wait for that instead of dying first. SIGTERM is only sent to us, so pass it on.
process.on('SIGINT', () => {});
process.on('SIGTERM', () => child.kill('SIGTERM'));
child.on('exit', (code, signal) => process.exit(code ?? (signal ? 130 : 1)));
