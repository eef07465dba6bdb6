// `node scripts/soak.mjs [--minutes 10] [--rate 500] [--fault-every 60] [--redis-timeout 100]
// [--margin 1000]`: a soak test. It starts its own redis-server and tollgate (`node dist/main.js`,
// built first if needed) on free ports on 127.0.0.1, sends a steady rate of checks for the given
// time, and injects a fault every --fault-every seconds, in rotation: Redis killed and restarted,
// SCRIPT FLUSH, DEBUG SLEEP longer than REDIS_TIMEOUT, CLIENT KILL of tollgate's connections, and
// a rules reload by editing the file. Every 10 s it prints tollgate's RSS, its event-loop delay
// (from /metrics), the answers by kind, the errors and the latency; at the end it writes
// bench/results/soak-<time>.{json,md}. It exits 1 if any call hung (no answer within
// REDIS_TIMEOUT + --margin ms) or tollgate crashed, 2 on a usage error.
import { execFileSync, spawn } from 'node:child_process';
import { mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import http from 'node:http';
import { freePort } from './freePort.mjs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { performance } from 'node:perf_hooks';
import { clearInterval, setInterval } from 'node:timers';
import { setTimeout as sleep } from 'node:timers/promises';
import { fileURLToPath } from 'node:url';
import { parseArgs } from 'node:util';

const root = join(dirname(fileURLToPath(import.meta.url)), '..');

function usage(message) {
  console.error(`soak: ${message}`);
  console.error(
    'usage: node scripts/soak.mjs [--minutes N] [--rate REQ_PER_S] [--fault-every SECONDS] ' +
      '[--redis-timeout MS] [--margin MS]',
  );
  process.exit(2);
}

let args;
try {
  args = parseArgs({
    options: {
      minutes: { type: 'string', default: '10' },
      rate: { type: 'string', default: '500' },
      'fault-every': { type: 'string', default: '60' },
      'redis-timeout': { type: 'string', default: '100' },
      margin: { type: 'string', default: '1000' },
    },
  }).values;
} catch (error) {
  usage(error.message);
}
const positive = (name) => {
  const value = Number(args[name]);
  if (!Number.isFinite(value) || value <= 0) usage(`--${name} must be a positive number`);
  return value;
};
const MINUTES = positive('minutes');
const RATE = positive('rate');
const FAULT_EVERY_MS = positive('fault-every') * 1000;
const REDIS_TIMEOUT_MS = positive('redis-timeout');
const MARGIN_MS = positive('margin');
const DEADLINE_MS = REDIS_TIMEOUT_MS + MARGIN_MS;
const DURATION_MS = MINUTES * 60_000;
const REPORT_EVERY_MS = 10_000;
/** The load is open-loop; past this many calls in flight it counts calls as skipped instead. */
const MAX_IN_FLIGHT = 5_000;

execFileSync(process.execPath, [join(root, 'scripts/build-if-needed.mjs')], {
  cwd: root,
  stdio: 'inherit',
});
const { createRateLimitClient } = await import('@tollgate/client');
const { Redis } = await import('ioredis');

function httpGet(url, timeoutMs = 2_000) {
  return new Promise((resolve, reject) => {
    const request = http.get(url, { timeout: timeoutMs }, (response) => {
      let body = '';
      response.setEncoding('utf8');
      response.on('data', (chunk) => (body += chunk));
      response.on('end', () => resolve({ status: response.statusCode, body }));
    });
    request.on('timeout', () => request.destroy(new Error(`GET ${url} timed out`)));
    request.on('error', reject);
  });
}

// --- Redis: our own redis-server, killed and started again on the same port.
const redisPort = await freePort();
let redisChild;
async function startRedis() {
  redisChild = spawn(
    'redis-server',
    [
      ...['--port', String(redisPort), '--bind', '127.0.0.1', '--save', '', '--appendonly', 'no'],
      ...['--enable-debug-command', 'yes', '--daemonize', 'no', '--logfile', ''],
    ],
    { stdio: 'ignore' },
  );
  redisChild.once('error', (error) => {
    console.error(`soak: cannot start redis-server: ${error.message}`);
    process.exit(2);
  });
  const admin = new Redis({ port: redisPort, host: '127.0.0.1', lazyConnect: true });
  admin.on('error', () => {});
  for (let tries = 0; ; tries++) {
    try {
      await admin.connect();
      await admin.ping();
      return;
    } catch (error) {
      if (tries > 100) throw new Error(`redis-server did not start: ${error.message}`);
      await sleep(50);
    } finally {
      admin.disconnect();
    }
  }
}
async function killRedis() {
  const dying = redisChild;
  if (dying.exitCode !== null || dying.signalCode !== null) return;
  await new Promise((resolve) => {
    dying.once('exit', resolve);
    dying.kill('SIGKILL');
  });
}
await startRedis();
// The admin connection sends the faults; it reconnects by itself after a restart.
const admin = new Redis({ port: redisPort, host: '127.0.0.1', maxRetriesPerRequest: 1 });
admin.on('error', () => {});
await admin.client('SETNAME', 'soak-admin');

// --- tollgate: the built entry point, as `npm start` runs it.
const dir = mkdtempSync(join(tmpdir(), 'tollgate-soak-'));
const rulesPath = join(dir, 'rules.yaml');
const rules = (hotLimit) => `domain: soak
descriptors:
  - key: tenant
    rate_limit: {unit: minute, requests_per_unit: 600}
    descriptors:
      - key: route
        rate_limit: {unit: second, requests_per_unit: 20, algorithm: token_bucket}
  - key: hot
    rate_limit: {unit: second, requests_per_unit: ${hotLimit}, algorithm: fixed_window}
`;
let hotLimit = 20;
writeFileSync(rulesPath, rules(hotLimit));
const grpcPort = await freePort();
const httpPort = await freePort();
const tollgate = spawn(process.execPath, [join(root, 'dist/main.js')], {
  cwd: root,
  env: {
    ...process.env,
    CONFIG_PATH: rulesPath,
    GRPC_HOST: '127.0.0.1',
    GRPC_PORT: String(grpcPort),
    HOST: '127.0.0.1',
    PORT: String(httpPort),
    REDIS_URL: `redis://127.0.0.1:${redisPort}`,
    REDIS_TIMEOUT: `${REDIS_TIMEOUT_MS}ms`,
    FAILURE_MODE: 'error',
    LOG_LEVEL: 'error',
    CONFIG_POLL_INTERVAL: '1s',
  },
  stdio: ['ignore', 'ignore', 'pipe'],
});
let tollgateStderr = '';
tollgate.stderr.on('data', (chunk) => (tollgateStderr = (tollgateStderr + chunk).slice(-4_000)));
let stopping = false;
let crashed;
tollgate.once('exit', (code, signal) => {
  if (!stopping) crashed = `tollgate exited (code ${code}, signal ${signal}): ${tollgateStderr}`;
});
const httpUrl = `http://127.0.0.1:${httpPort}`;
for (let tries = 0; ; tries++) {
  const health = await httpGet(`${httpUrl}/healthcheck`).catch(() => undefined);
  if (health?.status === 200) break;
  if (crashed || tries > 150) {
    console.error(`soak: tollgate did not become healthy: ${crashed ?? tollgateStderr}`);
    await killRedis();
    process.exit(1);
  }
  await sleep(100);
}
const client = createRateLimitClient(`127.0.0.1:${grpcPort}`);

// --- Measurements.
const newCounts = () => ({
  calls: 0,
  OK: 0,
  OVER_LIMIT: 0,
  UNAVAILABLE: 0,
  other: 0,
  hung: 0,
  skipped: 0,
  maxLatencyMs: 0,
  errors: {},
});
const total = newCounts();
let interval = newCounts();
let latencies = [];
const intervals = [];
const faults = [];
let inFlight = 0;

function record(kind, latencyMs, error) {
  for (const counts of [total, interval]) {
    counts.calls += 1;
    counts[kind] += 1;
    counts.maxLatencyMs = Math.max(counts.maxLatencyMs, latencyMs);
    if (error !== undefined) counts.errors[error] = (counts.errors[error] ?? 0) + 1;
  }
  latencies.push(latencyMs);
}

const TENANTS = 1_000;
function request(i) {
  // One call in ten goes to one hot key, so that OVER_LIMIT is part of the mix.
  if (i % 10 === 0)
    return { domain: 'soak', descriptors: [{ entries: [{ key: 'hot', value: 'h' }] }] };
  const tenant = `t${i % TENANTS}`;
  return {
    domain: 'soak',
    descriptors: [
      { entries: [{ key: 'tenant', value: tenant }] },
      {
        entries: [
          { key: 'tenant', value: tenant },
          { key: 'route', value: `/r${i % 7}` },
        ],
      },
    ],
  };
}

function call(i) {
  if (inFlight >= MAX_IN_FLIGHT) {
    total.skipped += 1;
    interval.skipped += 1;
    return;
  }
  inFlight += 1;
  const started = performance.now();
  client.ShouldRateLimit(request(i), { deadline: Date.now() + DEADLINE_MS }, (error, response) => {
    inFlight -= 1;
    const latencyMs = performance.now() - started;
    if (!error) {
      const code = response.overall_code;
      return record(code === 'OK' || code === 'OVER_LIMIT' ? code : 'other', latencyMs);
    }
    // 4 is DEADLINE_EXCEEDED: no answer within REDIS_TIMEOUT + margin, i.e. a hung call.
    const kind = error.code === 14 ? 'UNAVAILABLE' : error.code === 4 ? 'hung' : 'other';
    const name = kind === 'other' ? `code ${error.code}` : kind;
    const detail = `${name}: ${error.details.replace(/[0-9a-f]{40}|\d+/g, 'N').slice(0, 100)}`;
    record(kind, latencyMs, detail);
  });
}

async function sample() {
  let rssMb = NaN;
  try {
    const status = readFileSync(`/proc/${tollgate.pid}/status`, 'utf8');
    rssMb = Number(/^VmRSS:\s+(\d+)/m.exec(status)?.[1]) / 1024;
  } catch {
    rssMb = Number(execFileSync('ps', ['-o', 'rss=', '-p', String(tollgate.pid)])) / 1024;
  }
  const lag = {};
  const metrics = await httpGet(`${httpUrl}/metrics`).catch(() => undefined);
  for (const match of metrics?.body.matchAll(
    /^tollgate_nodejs_eventloop_lag_(\w+)_seconds (\S+)/gm,
  ) ?? []) {
    lag[match[1]] = Number(match[2]) * 1000;
  }
  return { rssMb, lagP99Ms: lag.p99, lagMaxMs: lag.max, lagMeanMs: lag.mean };
}

function percentile(values, p) {
  if (values.length === 0) return 0;
  const sorted = Float64Array.from(values).sort();
  return sorted[Math.min(sorted.length - 1, Math.floor((p / 100) * sorted.length))];
}

// --- Faults, in rotation.
const FAULTS = [
  {
    name: 'kill Redis, restart it 2 s later',
    async inject() {
      await killRedis();
      await sleep(2_000);
      await startRedis();
    },
  },
  { name: 'SCRIPT FLUSH', inject: () => admin.script('FLUSH') },
  {
    name: `DEBUG SLEEP ${Math.max(1, (REDIS_TIMEOUT_MS * 5) / 1000)} s`,
    inject: () => admin.call('DEBUG', 'SLEEP', String(Math.max(1, (REDIS_TIMEOUT_MS * 5) / 1000))),
  },
  {
    name: "CLIENT KILL of tollgate's connections",
    async inject() {
      return `${await admin.client('KILL', 'TYPE', 'normal', 'SKIPME', 'yes')} killed`;
    },
  },
  {
    name: 'rules reload (the hot limit changed)',
    async inject() {
      hotLimit = hotLimit === 20 ? 25 : 20;
      writeFileSync(rulesPath, rules(hotLimit));
      // The reload shows in /rlconfig once it is taken.
      for (let tries = 0; tries < 50; tries++) {
        const config = await httpGet(`${httpUrl}/rlconfig`).catch(() => undefined);
        const hot = config?.body.split('\n').find((line) => line.startsWith('soak.hot'));
        if (hot?.includes(`requests_per_unit=${hotLimit},`)) return 'taken';
        await sleep(100);
      }
      return 'not seen in /rlconfig within 5 s';
    },
  },
];

// --- The run.
console.log(
  `soak: ${MINUTES} min at ${RATE} req/s against tollgate (pid ${tollgate.pid}) and redis-server :${redisPort}; ` +
    `REDIS_TIMEOUT ${REDIS_TIMEOUT_MS} ms, a call hangs past ${DEADLINE_MS} ms; a fault every ${FAULT_EVERY_MS / 1000} s`,
);
const runStarted = performance.now();
let issued = 0;
let nextFault = 0;
let pendingFault;
// The first fault comes half an interval in, then one every interval: with the defaults, at
// 0:30, 1:30, ... so that even a one-minute run sees one. None starts in the last 5 s.
let nextFaultAtMs = FAULT_EVERY_MS / 2;
function maybeInjectFault(nowMs) {
  if (pendingFault || nowMs < nextFaultAtMs || nowMs > DURATION_MS - 5_000) return;
  nextFaultAtMs += FAULT_EVERY_MS;
  const fault = FAULTS[nextFault++ % FAULTS.length];
  const atS = nowMs / 1000;
  const started = performance.now();
  console.log(`  [${atS.toFixed(1)} s] fault: ${fault.name}`);
  const entry = { atS, name: fault.name, tookMs: NaN, result: 'running' };
  faults.push(entry);
  const done = (result) => Object.assign(entry, { tookMs: performance.now() - started, result });
  pendingFault = Promise.resolve()
    .then(() => fault.inject())
    .then(
      (result) => done(String(result ?? 'done')),
      (error) => done(`failed: ${error.message}`),
    )
    .finally(() => (pendingFault = undefined));
}
const loadTimer = setInterval(() => {
  maybeInjectFault(performance.now() - runStarted);
  const due = Math.min(
    RATE * 60 * MINUTES,
    Math.floor(((performance.now() - runStarted) / 1000) * RATE),
  );
  for (; issued < due; issued++) call(issued);
}, 5);
let reportTimer;
await new Promise((resolve) => {
  reportTimer = setInterval(async () => {
    const atS = (performance.now() - runStarted) / 1000;
    const counts = interval;
    const p99 = percentile(latencies, 99);
    interval = newCounts();
    latencies = [];
    const sampled = await sample().catch(() => ({}));
    const injected = faults.filter((x) => x.atS > atS - REPORT_EVERY_MS / 1000).map((x) => x.name);
    const row = {
      atS: Math.round(atS),
      ...counts,
      p99LatencyMs: p99,
      ...sampled,
      faults: injected,
    };
    intervals.push(row);
    const errors = Object.entries(counts.errors).map(([text, n]) => `${n}× ${text}`);
    console.log(
      `  [${atS.toFixed(0)} s] ${counts.calls} calls: OK ${counts.OK}, OVER_LIMIT ${counts.OVER_LIMIT}, ` +
        `UNAVAILABLE ${counts.UNAVAILABLE}, other ${counts.other}, hung ${counts.hung}` +
        `${counts.skipped ? `, skipped ${counts.skipped}` : ''}; latency max ${counts.maxLatencyMs.toFixed(1)} ms, ` +
        `p99 ${p99.toFixed(1)} ms; RSS ${row.rssMb?.toFixed(1)} MB; event-loop delay p99 ${row.lagP99Ms?.toFixed(1)} ms, ` +
        `max ${row.lagMaxMs?.toFixed(1)} ms${errors.length ? `\n      errors: ${errors.join('; ')}` : ''}`,
    );
    if (crashed || atS * 1000 >= DURATION_MS) resolve();
  }, REPORT_EVERY_MS);
});
clearInterval(loadTimer);
clearInterval(reportTimer);
await pendingFault;
// Every call has its deadline: wait for the last ones to answer or expire.
for (
  const waitStarted = performance.now();
  inFlight > 0 && performance.now() - waitStarted < DEADLINE_MS + 2_000;
) {
  await sleep(50);
}

// --- Shutdown and summary.
client.close();
stopping = true;
const exit = crashed
  ? undefined
  : await new Promise((resolve) => {
      tollgate.once('exit', (code, signal) => resolve({ code, signal }));
      tollgate.kill('SIGTERM');
    });
admin.disconnect();
await killRedis();
rmSync(dir, { recursive: true, force: true });

const rss = intervals.map((row) => row.rssMb).filter(Number.isFinite);
const lagMax = intervals.map((row) => row.lagMaxMs).filter(Number.isFinite);
const summary = {
  startedAt: new Date(Date.now() - (performance.now() - runStarted)).toISOString(),
  settings: {
    minutes: MINUTES,
    rate: RATE,
    faultEverySeconds: FAULT_EVERY_MS / 1000,
    redisTimeoutMs: REDIS_TIMEOUT_MS,
    hungAfterMs: DEADLINE_MS,
  },
  total: { ...total, inFlightAtEnd: inFlight },
  rssMb: { first: rss[0], last: rss.at(-1), max: Math.max(...rss) },
  eventLoopDelayMaxMs: Math.max(...lagMax),
  faults,
  intervals,
  tollgateExit: exit ?? null,
  crashed: crashed ?? null,
  passed: !crashed && total.hung === 0 && inFlight === 0 && exit?.code === 0,
};

const f = (n, digits = 1) => (Number.isFinite(n) ? n.toFixed(digits) : '–');
const markdown = [
  `# Soak: ${MINUTES} min at ${RATE} req/s, a fault every ${FAULT_EVERY_MS / 1000} s`,
  '',
  `Started ${summary.startedAt}. REDIS_TIMEOUT ${REDIS_TIMEOUT_MS} ms, FAILURE_MODE=error; a call with no answer within ${DEADLINE_MS} ms counts as hung.`,
  '',
  `**${summary.passed ? 'PASSED' : 'FAILED'}**: ${total.calls} calls: OK ${total.OK}, OVER_LIMIT ${total.OVER_LIMIT}, ` +
    `UNAVAILABLE ${total.UNAVAILABLE}, other ${total.other}, hung ${total.hung}, skipped ${total.skipped}; ` +
    `max latency ${f(total.maxLatencyMs)} ms. tollgate RSS ${f(summary.rssMb.first)} → ${f(summary.rssMb.last)} MB ` +
    `(max ${f(summary.rssMb.max)}), event-loop delay max ${f(summary.eventLoopDelayMaxMs)} ms, ` +
    `${crashed ? `crashed: ${crashed}` : `exit ${exit?.code ?? exit?.signal} after SIGTERM`}.`,
  '',
  '| fault | at | took | result |',
  '|---|---|---|---|',
  ...faults.map((x) => `| ${x.name} | ${f(x.atS)} s | ${f(x.tookMs, 0)} ms | ${x.result} |`),
  '',
  '| time | calls | OK | OVER_LIMIT | UNAVAILABLE | other | hung | max latency | p99 latency | RSS | loop delay p99 / max | fault |',
  '|---|---|---|---|---|---|---|---|---|---|---|---|',
  ...intervals.map(
    (r) =>
      `| ${r.atS} s | ${r.calls} | ${r.OK} | ${r.OVER_LIMIT} | ${r.UNAVAILABLE} | ${r.other} | ${r.hung} | ` +
      `${f(r.maxLatencyMs)} ms | ${f(r.p99LatencyMs)} ms | ${f(r.rssMb)} MB | ${f(r.lagP99Ms)} / ${f(r.lagMaxMs)} ms | ` +
      `${r.faults.join(', ')} |`,
  ),
  '',
  'Errors:',
  '',
  ...(Object.keys(total.errors).length === 0
    ? ['none']
    : Object.entries(total.errors).map(([text, n]) => `- ${n} × \`${text}\``)),
  '',
].join('\n');

const results = join(root, 'bench', 'results');
mkdirSync(results, { recursive: true });
const stamp = summary.startedAt.replace(/[:.]/g, '-');
writeFileSync(join(results, `soak-${stamp}.json`), `${JSON.stringify(summary, null, 2)}\n`);
writeFileSync(join(results, `soak-${stamp}.md`), markdown);
console.log(`\n${markdown}\nsoak: wrote bench/results/soak-${stamp}.{json,md}`);
process.exit(summary.passed ? 0 : 1);
