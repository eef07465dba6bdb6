// Runs envoyproxy/ratelimit's own integration tests against tollgate, unchanged but for the server
// they start: test/reference-suite/runner stands in for the reference's runner package, starts
// tollgate (COMPAT_MODE=reference) with the environment each test's settings mean, and reads its
// statsd output as the tests read the reference's in-process stats.
//
// The tests come from the reference's Go module at the version the differential tests pin, so the
// module proxy serves them; nothing of them is kept in this repository. The Redis set-ups are the
// ones the reference's Makefile builds, as real redis-server processes on the same fixed ports:
// password-protected servers behind TLS (Redis's own TLS here, where the Makefile uses stunnel),
// two Sentinel groups and two three-node clusters. The tests start their plain servers themselves.
// The memcached tests are left out: tollgate has no memcached backend.
//
// Needs Go, redis-server, redis-cli and openssl. Exits non-zero unless every test passes (a parent
// test counts when its own checks fail) and every tollgate served until its test stopped it, and
// prints each test, and how long each tollgate took to stop. The runner's own tests run first.
//
//   node scripts/reference-suite.mjs [-run REGEXP]
import { execFileSync, spawn, spawnSync } from 'node:child_process';
import {
  cpSync,
  createWriteStream,
  mkdirSync,
  readFileSync,
  readdirSync,
  rmSync,
  writeFileSync,
} from 'node:fs';
import { createConnection } from 'node:net';
import { delimiter, dirname, join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { root } from './goBuild.mjs';

const VERSION = 'v1.4.1-0.20260122083618-3fb702589d36';
const MODULE = 'github.com/envoyproxy/ratelimit';
const PASSWORD = 'password123';
const work = join(root, '.cache', 'reference-suite');

function fail(message) {
  console.error(`reference-suite: ${message}`);
  process.exit(1);
}

for (const [command, args, what] of [
  ['go', ['version'], 'Go (to build the reference suite)'],
  ['redis-server', ['--version'], 'redis-server'],
  ['redis-cli', ['--version'], 'redis-cli (to create the clusters)'],
  ['openssl', ['version'], 'openssl (for the TLS certificate)'],
]) {
  const probe = spawnSync(command, args, { encoding: 'utf8' });
  if (probe.error || probe.status !== 0) fail(`${what} is needed and was not found`);
}

// The set-ups' fixed ports, as the reference's tests name them; all must be free.
const ports = {
  tollgate: [8082, 8083, 8084],
  xds: [18000],
  plain: [6380, 6383, 6384, 6385],
  tls: [6381, 6382, 6361, 16381, 16382, 16361],
  sentinel: [6392, 6393, 6397, 6398, 26394, 26395, 26396, 26399, 26400, 26401],
  cluster: [6386, 6387, 6388, 6389, 6390, 6391],
};

function listening(port) {
  return new Promise((resolve) => {
    const socket = createConnection({ host: '127.0.0.1', port });
    socket.once('connect', () => {
      socket.destroy();
      resolve(true);
    });
    socket.once('error', () => resolve(false));
  });
}

async function waitForPort(port, what) {
  for (let i = 0; i < 200; i++) {
    if (await listening(port)) return;
    await sleep(50);
  }
  fail(`${what} did not listen on port ${port} within 10 s`);
}

const busy = [];
for (const port of Object.values(ports).flat()) if (await listening(port)) busy.push(port);
if (busy.length > 0) {
  fail(`the reference's tests use fixed ports, and these are taken: ${busy.join(', ')}`);
}

// The tests and the runner that stands in for the reference's, in one Go module.
const source = execFileSync('go', ['mod', 'download', '-json', `${MODULE}@${VERSION}`], {
  encoding: 'utf8',
});
const moduleDir = JSON.parse(source).Dir;
rmSync(work, { recursive: true, force: true });
mkdirSync(work, { recursive: true });
for (const file of ['go.mod', 'go.sum', 'runner', 'summary']) {
  cpSync(join(root, 'test', 'reference-suite', file), join(work, file), { recursive: true });
}
const tests = join(work, 'integration');
cpSync(join(moduleDir, 'test', 'integration'), tests, { recursive: true });
execFileSync('chmod', ['-R', 'u+w', work]);
for (const file of readdirSync(tests).filter((name) => name.endsWith('.go'))) {
  const path = join(tests, file);
  const text = readFileSync(path, 'utf8');
  writeFileSync(
    path,
    text.replaceAll(`"${MODULE}/src/service_cmd/runner"`, '"tollgate/test/reference-suite/runner"'),
  );
}

const goEnv = {
  ...process.env,
  PATH: `${dirname(process.execPath)}${delimiter}${process.env.PATH ?? ''}`,
  GOFLAGS: '-mod=mod',
};
// The runner's and the summary's own tests first: a few seconds, with a fake tollgate.
const ownTests = spawnSync('go', ['test', '-count=1', './runner/', './summary/'], {
  cwd: work,
  env: goEnv,
  stdio: 'inherit',
});
if (ownTests.status !== 0) fail("the runner's own tests failed");

// The certificate the Makefile makes: the TLS fronts' own, and the client certificate that the
// verifying front accepts. It is trusted as the Makefile trusts it, through the CA store that the
// service reads (Node's extra CA certificates here).
execFileSync(
  'openssl',
  [
    'req',
    '-new',
    '-newkey',
    'rsa:2048',
    '-days',
    '2',
    '-nodes',
    '-x509',
    '-subj',
    '/CN=localhost',
    '-addext',
    'subjectAltName = DNS:localhost,IP:127.0.0.1',
    '-keyout',
    join(work, 'key.pem'),
    '-out',
    join(work, 'cert.pem'),
  ],
  { stdio: 'ignore' },
);

const children = [];
function start(name, args) {
  const dir = join(work, 'redis', name);
  mkdirSync(dir, { recursive: true });
  const child = spawn('redis-server', args, { cwd: dir, stdio: 'ignore', detached: true });
  children.push(child);
  return dir;
}
function stopAll() {
  for (const child of children) {
    try {
      process.kill(-child.pid, 'SIGKILL');
    } catch {
      // Already gone.
    }
  }
}
process.on('exit', stopAll);
for (const signal of ['SIGINT', 'SIGTERM']) process.on(signal, () => process.exit(1));

const auth = ['--requirepass', PASSWORD, '--save', '', '--appendonly', 'no'];
const tlsFiles = [
  '--tls-cert-file',
  join(work, 'cert.pem'),
  '--tls-key-file',
  join(work, 'key.pem'),
  '--tls-ca-cert-file',
  join(work, 'cert.pem'),
];
for (const [port, tlsPort, verifyPeer] of [
  [6381, 16381, false],
  [6382, 16382, false],
  [6361, 16361, true],
]) {
  start(String(tlsPort), [
    '--port',
    String(port),
    '--tls-port',
    String(tlsPort),
    ...tlsFiles,
    '--tls-auth-clients',
    verifyPeer ? 'yes' : 'no',
    ...auth,
  ]);
}
for (const [master, replica, sentinels, conf] of [
  [6392, 6393, [26394, 26395, 26396], 'sentinel.conf'],
  [6397, 6398, [26399, 26400, 26401], 'sentinel-pre-second.conf'],
]) {
  start(String(master), ['--port', String(master), ...auth]);
  start(String(replica), [
    '--port',
    String(replica),
    ...auth,
    '--replicaof',
    '127.0.0.1',
    String(master),
    '--masterauth',
    PASSWORD,
  ]);
  for (const port of sentinels) {
    const dir = join(work, 'redis', String(port));
    mkdirSync(dir, { recursive: true });
    cpSync(join(tests, 'conf', conf), join(dir, 'sentinel.conf'));
    start(String(port), [join(dir, 'sentinel.conf'), '--sentinel', '--port', String(port)]);
  }
}
for (const port of ports.cluster) {
  start(String(port), ['--port', String(port), '--cluster-enabled', 'yes', ...auth]);
}
for (const port of [...ports.tls.slice(0, 3), ...ports.sentinel, ...ports.cluster]) {
  await waitForPort(port, 'redis-server');
}
for (const nodes of [ports.cluster.slice(0, 3), ports.cluster.slice(3)]) {
  execFileSync(
    'redis-cli',
    [
      '-a',
      PASSWORD,
      '--no-auth-warning',
      '--cluster',
      'create',
      ...nodes.map((port) => `127.0.0.1:${port}`),
      '--cluster-replicas',
      '0',
      '--cluster-yes',
    ],
    { stdio: 'ignore' },
  );
}
/** Waits up to 10 s for a redis-cli command on `port` to print `expected`. */
async function waitForReply(port, command, expected, what) {
  for (let i = 0; i < 200; i++) {
    const reply = spawnSync(
      'redis-cli',
      ['-p', String(port), '-a', PASSWORD, '--no-auth-warning', ...command],
      { encoding: 'utf8' },
    );
    if (reply.stdout.includes(expected)) return;
    await sleep(50);
  }
  fail(`${what} on port ${port} did not show ${expected} within 10 s`);
}
// A cluster serves once every node agrees that all slots are covered.
for (const port of ports.cluster) {
  await waitForReply(port, ['cluster', 'info'], 'cluster_state:ok', 'the cluster node');
}
// The replicas have synchronised, so Sentinel knows them and the masters are writable.
for (const port of [6393, 6398]) {
  await waitForReply(port, ['info', 'replication'], 'master_link_status:up', 'the replica');
}

execFileSync(process.execPath, [join(root, 'scripts', 'build-if-needed.mjs')], {
  cwd: root,
  stdio: 'inherit',
});

const runs = join(work, 'runs.jsonl');
const filter = process.argv.indexOf('-run');
const goTest = spawn(
  'go',
  [
    'test',
    '-tags=integration',
    '-count=1',
    '-json',
    '-timeout',
    '25m',
    '-skip',
    'Memcache',
    ...(filter > 0 ? ['-run', process.argv[filter + 1]] : []),
    './integration/',
  ],
  {
    cwd: work,
    env: {
      ...goEnv,
      PROJECT_DIR: work,
      // tollgate runs on the Node that runs this script, which is also first on PATH.
      TOLLGATE_COMMAND: JSON.stringify([process.execPath, join(root, 'dist', 'main.js')]),
      TOLLGATE_SUITE_LOG: runs,
      NODE_EXTRA_CA_CERTS: join(work, 'cert.pem'),
    },
    stdio: ['ignore', 'pipe', 'inherit'],
  },
);

// go test's events go to a file as they come; then test/reference-suite/summary reads them beside
// the suite log of the tollgate runs, prints every test and exits as the run went.
let buffer = '';
const eventsPath = join(work, 'events.jsonl');
const events = createWriteStream(eventsPath);
goTest.stdout.on('data', (chunk) => {
  events.write(chunk);
  buffer += chunk;
  let newline;
  while ((newline = buffer.indexOf('\n')) >= 0) {
    const line = buffer.slice(0, newline);
    buffer = buffer.slice(newline + 1);
    // What is not an event (a build error) is shown as it comes.
    if (!line.startsWith('{')) process.stdout.write(`${line}\n`);
  }
});
const code = await new Promise((resolve) => goTest.on('close', resolve));
await new Promise((resolve) => events.end(resolve));
const summarize = join(work, 'summarize');
execFileSync('go', ['build', '-o', summarize, './summary'], { cwd: work, env: goEnv });
const summary = spawnSync(
  summarize,
  ['-events', eventsPath, '-runs', runs, '-exit', String(code ?? 1)],
  {
    stdio: 'inherit',
  },
);
process.exit(summary.status === 0 ? 0 : 1);
