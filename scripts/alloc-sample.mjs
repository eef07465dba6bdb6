// What a process allocates, by function, collected objects included: loaded into a process with
// --import, it starts V8's sampling heap profiler on SIGUSR2 and writes the profile to
// ALLOC_SAMPLE_OUT (a .heapprofile, which Chrome's DevTools opens) when SIGTERM arrives. With
// scripts/loop-delay.mjs, which sends SIGUSR2 after its warm-up, it covers the measured calls only:
//
//   ALLOC_SAMPLE_OUT=redis.heapprofile node scripts/loop-delay.mjs --rps 1000 --seconds 5 \
//     --redis-url redis://127.0.0.1:PORT -- --import ./scripts/alloc-sample.mjs
//
// Run as a script, it prints the functions that allocated most in such a profile, and the total:
//
//   node scripts/alloc-sample.mjs redis.heapprofile [--top N]
//
// Node's own --heap-prof keeps only what is still alive when the process exits, which says
// nothing of the allocations that the scavenger collects a few milliseconds later.
import { readFileSync, writeFileSync } from 'node:fs';
import { Session } from 'node:inspector';
import { fileURLToPath } from 'node:url';
import { parseArgs } from 'node:util';

/** One sample in 4 KiB allocated, on average. */
const SAMPLING_INTERVAL = 4096;

if (process.argv[1] === fileURLToPath(import.meta.url)) printTop();
else sampleUntilExit();

function sampleUntilExit() {
  const out = process.env.ALLOC_SAMPLE_OUT;
  if (!out) throw new Error('alloc-sample: ALLOC_SAMPLE_OUT is unset');
  const session = new Session();
  session.connect();
  const post = (method, params) =>
    new Promise((resolve, reject) =>
      session.post(method, params, (error, result) => (error ? reject(error) : resolve(result))),
    );
  process.on('SIGUSR2', () => {
    void post('HeapProfiler.enable').then(() =>
      post('HeapProfiler.startSampling', {
        samplingInterval: SAMPLING_INTERVAL,
        includeObjectsCollectedByMajorGC: true,
        includeObjectsCollectedByMinorGC: true,
      }),
    );
  });
  let written = false;
  // Before the process's own handler, which drains and exits: the session answers synchronously.
  process.prependListener('SIGTERM', () => {
    if (written) return;
    written = true;
    session.post('HeapProfiler.stopSampling', (error, result) => {
      if (error) process.stderr.write(`alloc-sample: ${error.message}\n`);
      else writeFileSync(out, JSON.stringify(result.profile));
    });
  });
}

function printTop() {
  const { values, positionals } = parseArgs({
    allowPositionals: true,
    options: { top: { type: 'string', default: '30' } },
  });
  const [file] = positionals;
  if (!file) throw new Error('usage: node scripts/alloc-sample.mjs PROFILE [--top N]');
  const profile = JSON.parse(readFileSync(file, 'utf8'));
  const bytes = new Map();
  let total = 0;
  const visit = (node) => {
    const frame = node.callFrame;
    const where = frame.url.replace(/^.*\/node_modules\//, '').replace(/^.*\/dist\//, 'dist/');
    const name = `${frame.functionName || '(anonymous)'} ${where}:${frame.lineNumber + 1}`;
    if (node.selfSize > 0) bytes.set(name, (bytes.get(name) ?? 0) + node.selfSize);
    total += node.selfSize;
    for (const child of node.children ?? []) visit(child);
  };
  visit(profile.head);
  const mb = (n) => (n / 1e6).toFixed(2).padStart(8);
  console.log(`${mb(total)} MB allocated in all`);
  const top = [...bytes].sort((a, b) => b[1] - a[1]).slice(0, Number(values.top));
  for (const [name, size] of top) console.log(`${mb(size)} ${name}`);
}
