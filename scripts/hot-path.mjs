// tollgate's own work per call, in one process, with no server and no socket: decoding the
// request, the limiter's decision on the in-memory store (rule matching, keys, the decision,
// headers), the metrics of the check, and encoding the reply. Timed in CPU time (the process's,
// which leaves out the time a shared machine did not run it), as the median of rounds of many calls.
//
//   node scripts/hot-path.mjs [--scenario one|three] [--calls N] [--rounds R] [--redis-port P] DIST...
//
// --redis-port decides on a redis-server already listening on 127.0.0.1 (one call at a time, so the
// CPU time includes the socket's system calls but no batching).
//
// With two builds (say, `dist` and a copy of an older one), the rounds alternate between them,
// so that both see the same machine, and it prints each one's median CPU ns per call.
import { Buffer } from 'node:buffer';
import { existsSync, mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { performance } from 'node:perf_hooks';
import { pathToFileURL } from 'node:url';

const args = process.argv.slice(2);
const option = (name, fallback) => {
  const at = args.indexOf(`--${name}`);
  if (at < 0) return fallback;
  return args.splice(at, 2)[1];
};
const scenario = option('scenario', 'one');
// A port of a redis-server on 127.0.0.1 to decide on, instead of the in-memory store.
const redisPort = option('redis-port', undefined);
const calls = Number(option('calls', '20000'));
const rounds = Number(option('rounds', '15'));
const dists = args.length > 0 ? args : ['dist'];

const rules = join(mkdtempSync(join(tmpdir(), 'hot-path-')), 'rules.yaml');
writeFileSync(
  rules,
  `domain: bench
descriptors:
  - key: hot
    rate_limit: {unit: hour, requests_per_unit: 4000000000}
  - key: tenant
    rate_limit: {unit: hour, requests_per_unit: 4000000000}
    descriptors:
      - key: route
        rate_limit: {unit: hour, requests_per_unit: 4000000000}
  - key: remote_address
    rate_limit: {unit: hour, requests_per_unit: 4000000000}
`,
);

const descriptors =
  scenario === 'three'
    ? [
        { entries: [{ key: 'tenant', value: 'acme' }] },
        {
          entries: [
            { key: 'tenant', value: 'acme' },
            { key: 'route', value: '/orders' },
          ],
        },
        { entries: [{ key: 'remote_address', value: '10.1.2.3' }] },
      ]
    : [{ entries: [{ key: 'hot', value: 'one' }] }];

/** One build's path of a call, as the service runs it (process/service.ts's decide). */
async function pathOf(dist) {
  // A module by its place in src/'s folders, or by its place before src/ had them, so that a build
  // of either layout can be compared with the other.
  const load = (file, before = file) =>
    import(pathToFileURL(resolve(dist, existsSync(resolve(dist, file)) ? file : before)).href);
  const { createLimiter } = await load('decision/limiter.js', 'limiter.js');
  const { createMemoryStore } = await load('store/memoryStore.js');
  const { createRedisStore } = await load('store/redisStore.js');
  const { createMetrics } = await load('observability/metrics.js', 'metrics.js');
  const { loadRules } = await load('rules/loadRules.js');
  const { createRequestDecoder, encodeResponse } = await load(
    'servers/grpc/codec.js',
    'grpc/codec.js',
  );
  const { loadProtoRoot } = await load('core/protos.js', 'grpc/protos.js');
  const requestType = loadProtoRoot('strings').lookupType(
    'envoy.service.ratelimit.v3.RateLimitRequest',
  );
  const request = Buffer.from(requestType.encode({ domain: 'bench', descriptors }).finish());
  const ruleSet = loadRules(rules, { defaultAlgorithm: 'fixed_window', mergeDomainConfig: false });
  const metrics = createMetrics({ maxDetailedSeries: 1000 });
  const store =
    redisPort === undefined
      ? createMemoryStore()
      : createRedisStore(
          {
            type: 'single',
            host: '127.0.0.1',
            port: Number(redisPort),
            username: undefined,
            password: undefined,
            db: 0,
            tls: undefined,
            timeoutMs: 1_000,
          },
          { batchLimit: 16 },
        );
  // Connected before anything counts.
  await store.ping();
  const limiter = createLimiter({
    rules: () => ruleSet,
    store,
    clock: undefined,
    defaultAlgorithm: 'fixed_window',
    keyPrefix: '',
    failureMode: 'error',
    observe: (event) => metrics.observe(event),
  });
  const decode = createRequestDecoder({ maxDescriptors: 64, maxEntries: 16, maxEntryBytes: 1024 });
  let bytes = 0;
  return {
    metrics,
    close: () => store.close(),
    async call() {
      const decoded = decode(request);
      if (!decoded.ok) throw decoded.error;
      const started = performance.now();
      const decision = await limiter.decide(decoded.check);
      metrics.observeLatency((performance.now() - started) / 1000, 'ok');
      bytes += encodeResponse(decision).length;
      return bytes;
    },
  };
}

const paths = [];
for (const dist of dists) paths.push({ dist, path: await pathOf(dist), samples: [] });
// Warm-up: every build's code optimized before anything counts.
for (const { path } of paths) for (let i = 0; i < calls; i++) await path.call();
for (let round = 0; round < rounds; round++) {
  for (const entry of round % 2 === 0 ? paths : [...paths].reverse()) {
    const started = process.cpuUsage();
    for (let i = 0; i < calls; i++) await entry.path.call();
    const used = process.cpuUsage(started);
    entry.samples.push(((used.user + used.system) * 1000) / calls);
    // A scrape now and then, as Prometheus does, so that work moved off the path is still paid.
    await entry.path.metrics.text();
  }
}
const median = (values) => [...values].sort((a, b) => a - b)[Math.floor(values.length / 2)];
for (const { dist, samples } of paths) {
  const sorted = [...samples].sort((a, b) => a - b);
  console.log(
    `${dist}: ${median(samples).toFixed(0)} CPU ns/call (min ${sorted[0].toFixed(0)}, ` +
      `max ${sorted[sorted.length - 1].toFixed(0)}; ${scenario} descriptor${scenario === 'one' ? '' : 's'}, ${rounds} rounds of ${calls})`,
  );
}
for (const { path } of paths) await path.close();
