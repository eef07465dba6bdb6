// RLQS at scale: a thousand simulated Envoys, each with a stream of its own, on one tollgate, and
// one Envoy past the buckets-per-stream bound. What is held: every stream is served, reports are
// answered quickly, memory grows by a bounded amount per stream, and the one past the bound is
// refused with a message that names the setting while the others carry on.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { FLEET_RULES, realClock } from '../support/rlqsFleet.js';
import { metricValue } from '../support/metrics.js';
import { buildRlqsSim, runSimulation, type SimResult } from '../support/rlqsSim.js';
import { startTollgate, type Tollgate } from '../support/tollgate.js';

const STREAMS = 1_000;
const MAX_BUCKETS = 50;
const DURATION_MS = 20_000;
const REPORTING_INTERVAL_MS = 2_000;

let tollgate: Tollgate;
let result: SimResult;
let peakStreams = 0;
let heapGrowth = 0;

beforeAll(async () => {
  buildRlqsSim();
  tollgate = await startTollgate({
    rules: FLEET_RULES,
    clock: realClock,
    env: { RLQS_MAX_BUCKETS_PER_STREAM: String(MAX_BUCKETS), RLQS_MAX_STREAMS: '2000' },
  });
  global.gc?.();
  const heapBefore = process.memoryUsage().heapUsed;
  const groups = 10;
  const run = runSimulation({
    addr: tollgate.address,
    domain: 'fleet',
    durationMs: DURATION_MS,
    windowMs: 10_000,
    // Every 2 s, and the starts spread over 8 s: a scale that holds beside a second test suite.
    reportingIntervalMs: REPORTING_INTERVAL_MS,
    perClient: false,
    assignmentLimit: 10,
    seed: 3,
    clients: [
      ...Array.from({ length: groups }, (_, g) => ({
        name: `envoy${g}`,
        count: STREAMS / groups,
        rps: 2,
        jitter: 0.5,
        spreadMs: 8_000,
        buckets: [{ tenant: `scale${g}` }],
      })),
      {
        name: 'wide',
        rps: 100,
        buckets: Array.from({ length: MAX_BUCKETS + 1 }, (_, n) => ({ tenant: `wide${n}` })),
      },
    ],
  });
  let running = true;
  const watching = (async () => {
    while (running) {
      await new Promise((resolve) => setTimeout(resolve, 1_000));
      const text = await (await fetch(`${tollgate.httpUrl}/metrics`)).text();
      const streams = metricValue(text, 'tollgate_rlqs_streams') ?? 0;
      if (streams > peakStreams) {
        peakStreams = streams;
        heapGrowth = process.memoryUsage().heapUsed - heapBefore;
      }
    }
  })();
  result = await run;
  running = false;
  await watching;
}, 180_000);

afterAll(async () => {
  await tollgate?.stop();
});

describe('RLQS with a thousand streams', () => {
  it('serves every stream, and answers reports quickly', () => {
    expect(peakStreams).toBeGreaterThanOrEqual(STREAMS);
    expect(result.reports.latencyMs.count).toBeGreaterThan(STREAMS * 5);
    // Alone, the median is a few milliseconds and the 99th percentile some 20 ms; beside a second
    // test suite on 2 cores the 99th percentile has passed 2 s. What a client needs is its answer
    // before its assignment lapses: three reporting intervals.
    console.log(
      `[rlqs] ${STREAMS} streams: report latency ${JSON.stringify(result.reports.latencyMs)}`,
    );
    expect(result.reports.latencyMs.p99).toBeLessThan(3 * REPORTING_INTERVAL_MS);
    // Lost reports are those a client had due before its stream was open (or the refused
    // stream's): a thousand streams opening within 8 s on a busy machine lose a few.
    expect(result.reports.dropped).toBeLessThan(result.reports.sent * 0.05);
  });

  it('grows the heap by a bounded amount per stream', () => {
    // Measured in this process, which also runs the test: a loose bound, 100 KiB a stream.
    expect(heapGrowth).toBeLessThan(STREAMS * 100 * 1024);
  });

  it('refuses the stream past the buckets bound, naming the setting, and only it', () => {
    const refused = result.streamErrors.filter((e) => e.code === 'RESOURCE_EXHAUSTED');
    expect(refused.length).toBeGreaterThanOrEqual(1);
    for (const error of refused) {
      expect(error.client).toBe('wide');
      expect(error.message).toMatch(/50 buckets, RLQS_MAX_BUCKETS_PER_STREAM/);
    }
    expect(result.streamErrors.filter((e) => e.client !== 'wide')).toEqual([]);
  });
});
