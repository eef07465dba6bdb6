import { status as grpcStatus, type ServiceError } from '@grpc/grpc-js';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import type { RateLimitClient, RateLimitRequestObject } from '@tollgate/client';
import { spawnTollgate, type TollgateProcess } from '../support/processes.js';
import { freePort } from '../support/ports.js';
import { startRedis, type TestRedis } from '../support/redis.js';
import { callCheck, d, eventually } from '../support/tollgate.js';

// The faults of the brief's reliability targets, each under load: 8 concurrent callers loop
// against a tollgate process while Redis is killed, restarted, loses its script cache, stalls in
// DEBUG SLEEP or runs out of memory. Every call is tallied by its answer and timed. Each must
// answer as FAILURE_MODE says within REDIS_TIMEOUT plus a margin, none may hang, the process
// must not crash, and it must recover by itself. redisFaults.test.ts has the same faults one
// call at a time; here they land on calls in flight.

const TIMEOUT_MS = 200;
/** A loaded 2-core machine: the callers, tollgate and redis-server share it with other tests. */
const MARGIN_MS = 400;
const BOUND_MS = TIMEOUT_MS + MARGIN_MS;
const CALLERS = 8;
/** The `slow` tollgate's REDIS_TIMEOUT: long enough that 300 ms of margin is small beside it. */
const SLOW_TIMEOUT_MS = 500;
/** Every load loop stops at this many calls, whatever its phases say. */
const MAX_CALLS = 40_000;

const RULES = `
domain: faults
descriptors:
  - key: tenant
    rate_limit: {unit: hour, requests_per_unit: 4000000000}
`;

type Kind = 'OK' | 'OVER_LIMIT' | 'UNAVAILABLE' | 'other';
interface Tally {
  calls: number;
  kinds: Record<Kind, number>;
  /** OK answered by FAILURE_MODE=allow (no current_limit), not by Redis. */
  fallbacks: number;
  maxLatencyMs: number;
  /** Error details by count: what the callers saw when a call failed. */
  details: Map<string, number>;
}

const newTally = (): Tally => ({
  calls: 0,
  kinds: { OK: 0, OVER_LIMIT: 0, UNAVAILABLE: 0, other: 0 },
  fallbacks: 0,
  maxLatencyMs: 0,
  details: new Map(),
});

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

/**
 * 8 callers in closed loops, each pausing 1 ms between calls. A call is tallied under the phase
 * it started and ended in, or under `A → B` when a phase change fell while it was in flight (a
 * fault injected under it). The client deadline is far past the bound, so a hung call shows up
 * as a latency over it rather than vanishing.
 */
function startLoad(
  client: RateLimitClient,
  request: (caller: number, i: number) => RateLimitRequestObject,
) {
  const tallies = new Map<string, Tally>();
  let phase = 'before';
  let total = 0;
  let stopped = false;
  const record = (
    at: string,
    kind: Kind,
    latencyMs: number,
    fallback: boolean,
    detail?: string,
  ) => {
    const name = at === phase ? at : `${at} → ${phase}`;
    let tally = tallies.get(name);
    if (tally === undefined) tallies.set(name, (tally = newTally()));
    tally.calls += 1;
    tally.kinds[kind] += 1;
    if (fallback) tally.fallbacks += 1;
    tally.maxLatencyMs = Math.max(tally.maxLatencyMs, latencyMs);
    if (detail !== undefined) tally.details.set(detail, (tally.details.get(detail) ?? 0) + 1);
  };
  const callers = Array.from({ length: CALLERS }, async (_, caller) => {
    for (let i = 0; !stopped && total < MAX_CALLS; i++) {
      total += 1;
      const at = phase;
      const started = performance.now();
      try {
        const response = await callCheck(client, request(caller, i), BOUND_MS + 2_000);
        const code = response.overall_code;
        const kind: Kind = code === 'OK' || code === 'OVER_LIMIT' ? code : 'other';
        const fallback = kind === 'OK' && response.statuses?.[0]?.current_limit == null;
        const detail = kind === 'other' ? `overall_code ${code}` : undefined;
        record(at, kind, performance.now() - started, fallback, detail);
      } catch (error) {
        const { code, details } = error as ServiceError;
        const kind: Kind = code === grpcStatus.UNAVAILABLE ? 'UNAVAILABLE' : 'other';
        // Numbers vary from call to call (used memory, script SHA); the kind of message does not.
        const detail = `${grpcStatus[code]}: ${details.replace(/[0-9a-f]{40}|\d+/g, 'N').slice(0, 120)}`;
        record(at, kind, performance.now() - started, false, detail);
      }
      await sleep(1);
    }
  });
  return {
    phase(name: string) {
      phase = name;
    },
    /** The calls that started and ended in this phase. */
    tally(name: string): Tally {
      return tallies.get(name) ?? newTally();
    },
    /** Stops the callers and prints every phase's tally under this title. */
    async stop(title: string): Promise<Map<string, Tally>> {
      stopped = true;
      await Promise.all(callers);
      const lines = [...tallies].map(([name, t]) => {
        const kinds = Object.entries(t.kinds)
          .map(([k, n]) => `${k} ${n}`)
          .join(', ');
        const fallbacks = t.fallbacks > 0 ? ` (${t.fallbacks} by FAILURE_MODE)` : '';
        const errors = [...t.details].map(([text, n]) => `\n      ${n} × ${text}`).join('');
        return `  ${name}: ${t.calls} calls: ${kinds}${fallbacks}; max latency ${t.maxLatencyMs.toFixed(1)} ms${errors}`;
      });
      const calls = all(tallies).reduce((sum, t) => sum + t.calls, 0);
      console.log(`[faults] ${title}: ${calls} calls\n${lines.join('\n')}`);
      return tallies;
    },
  };
}

const all = (tallies: Map<string, Tally>) => [...tallies.values()];
const noscripts = (tallies: Map<string, Tally>) =>
  all(tallies).flatMap((t) => [...t.details.keys()].filter((text) => /NOSCRIPT/i.test(text)));

function expectAlive(tollgate: TollgateProcess): void {
  expect(tollgate.child.exitCode, tollgate.stderr()).toBeNull();
  expect(tollgate.child.signalCode, tollgate.stderr()).toBeNull();
}

/** A calm phase after a fault: every call answered by Redis again, and fast. */
function expectRecovered(tally: Tally): void {
  expect(tally.calls).toBeGreaterThan(0);
  expect(tally.kinds).toEqual({ OK: tally.calls, OVER_LIMIT: 0, UNAVAILABLE: 0, other: 0 });
  expect(tally.fallbacks).toBe(0);
  expect(tally.maxLatencyMs).toBeLessThan(BOUND_MS);
}

const tenant = (caller: number) => ({ domain: 'faults', descriptors: [d('tenant', `c${caller}`)] });

let redis: TestRedis;
const tollgates = new Map<string, TollgateProcess & { httpUrl: string }>();

beforeAll(async () => {
  redis = await startRedis();
  await Promise.all(
    ['error', 'allow', 'deny', 'slow'].map(async (mode) => {
      const httpPort = await freePort();
      const env = {
        REDIS_URL: redis.url,
        REDIS_TIMEOUT: `${mode === 'slow' ? SLOW_TIMEOUT_MS : TIMEOUT_MS}ms`,
        FAILURE_MODE: mode === 'slow' ? 'error' : mode,
        PORT: String(httpPort),
      };
      const tollgate = await spawnTollgate(RULES, env);
      tollgates.set(mode, { ...tollgate, httpUrl: `http://127.0.0.1:${httpPort}` });
      // Warm up the channel, the script cache and the JIT, so that the first test's first calls
      // are not the slowest of the run.
      for (let i = 0; i < 100; i++) await callCheck(tollgate.client, tenant(i % CALLERS));
    }),
  );
}, 60_000);

afterAll(async () => {
  const exits = await Promise.all([...tollgates.values()].map((t) => t.stop()));
  await redis?.stop();
  expect(exits).toEqual([...tollgates.values()].map(() => 0));
});

/** Answered by Redis: OK with the rule's limit (allow's fallback has none, deny's is OVER_LIMIT). */
async function decidedByRedis(tollgate: TollgateProcess): Promise<boolean> {
  const response = await callCheck(tollgate.client, tenant(99));
  return response.overall_code === 'OK' && response.statuses?.[0]?.current_limit != null;
}

// Whatever a test did to Redis, the next one starts with it up, empty, without a memory cap, and
// every tollgate deciding with it again (all three share it, so each fault hit all three).
afterEach(async () => {
  const up = await eventually(async () => (await redis.client.ping()) === 'PONG', 2_000).then(
    () => true,
    () => false,
  );
  if (!up) await redis.restart();
  await redis.client.config('SET', 'maxmemory', '0');
  await redis.client.flushall();
  for (const tollgate of tollgates.values())
    await eventually(() => decidedByRedis(tollgate), 5_000);
});

const tollgateFor = (mode: string) => tollgates.get(mode)!;

/** Phases other than the named ones: calls a fault fell on. Each answers `allowed`, in time. */
function expectTransitions(tallies: Map<string, Tally>, pure: string[], allowed: Kind[]): void {
  for (const [name, tally] of tallies) {
    if (pure.includes(name)) continue;
    const answered = [...new Set(allowed)].reduce((sum, kind) => sum + tally.kinds[kind], 0);
    expect(answered, `${name}: ${JSON.stringify(tally.kinds)}`).toBe(tally.calls);
  }
}

describe.each([
  { mode: 'error', expected: 'UNAVAILABLE' as const },
  { mode: 'allow', expected: 'OK' as const },
  { mode: 'deny', expected: 'OVER_LIMIT' as const },
])('Redis killed under load, FAILURE_MODE=$mode', ({ mode, expected }) => {
  it(`answers every call ${expected} within ${BOUND_MS} ms, then recovers when it returns`, async () => {
    const tollgate = tollgateFor(mode);
    const load = startLoad(tollgate.client, tenant);
    await sleep(500);
    load.phase('killing');
    await redis.kill();
    load.phase('outage');
    await sleep(1_500);
    load.phase('restarting');
    await redis.restart();
    await eventually(() => decidedByRedis(tollgate), 5_000);
    load.phase('recovered');
    await sleep(500);
    const tallies = await load.stop(`Redis killed, FAILURE_MODE=${mode}`);

    expectRecovered(load.tally('before'));
    const outage = load.tally('outage');
    expect(outage.calls).toBeGreaterThan(50);
    expect(outage.kinds[expected]).toBe(outage.calls);
    if (mode === 'allow') expect(outage.fallbacks).toBe(outage.calls);
    // In flight when Redis died, or while it came back: the failure mode's answer or Redis's.
    expectTransitions(tallies, ['before', 'outage', 'recovered'], ['OK', expected]);
    for (const tally of all(tallies)) expect(tally.maxLatencyMs).toBeLessThan(BOUND_MS);
    expectRecovered(load.tally('recovered'));
    expect(noscripts(tallies)).toEqual([]);
    expectAlive(tollgate);
  });
});

describe('Redis restarted under load', () => {
  it('recovers by itself within seconds, with no NOSCRIPT error and no call over the bound', async () => {
    const tollgate = tollgateFor('error');
    const load = startLoad(tollgate.client, tenant);
    await sleep(500);
    const recoveries: number[] = [];
    for (const round of [1, 2]) {
      load.phase(`restart ${round}`);
      const restarted = Date.now();
      // SIGKILL, then, after a gap that the load's calls must meet, a new, empty redis-server on
      // the same port. Without the gap a restart on a busy machine could land between two calls
      // and be felt by none.
      await redis.kill();
      await sleep(250);
      await redis.restart();
      await eventually(() => decidedByRedis(tollgate), 5_000);
      recoveries.push(Date.now() - restarted);
      load.phase(`after restart ${round}`);
      await sleep(700);
    }
    const tallies = await load.stop(
      `Redis restarted twice, FAILURE_MODE=error; decided by Redis again ${recoveries.join(' and ')} ms after each kill`,
    );

    expectRecovered(load.tally('before'));
    for (const round of [1, 2]) {
      // The outage was felt: by calls made during it, or by those in flight when Redis died.
      const felt = [...tallies]
        .filter(([name]) => name === `restart ${round}` || name.endsWith(` → restart ${round}`))
        .reduce((sum, [, tally]) => sum + tally.kinds.UNAVAILABLE, 0);
      expect(felt).toBeGreaterThan(0);
      expectRecovered(load.tally(`after restart ${round}`));
    }
    expectTransitions(tallies, [], ['OK', 'UNAVAILABLE']);
    for (const tally of all(tallies)) expect(tally.maxLatencyMs).toBeLessThan(BOUND_MS);
    expect(noscripts(tallies)).toEqual([]);
    expectAlive(tollgate);
  });
});

describe('FUNCTION FLUSH and SCRIPT FLUSH under load', () => {
  it('cost no failed call, flushed every 50 ms for 2 s', async () => {
    const tollgate = tollgateFor('error');
    await redis.client.config('RESETSTAT');
    const load = startLoad(tollgate.client, tenant);
    load.phase('flushing');
    let flushes = 0;
    for (const started = Date.now(); Date.now() - started < 2_000; flushes++) {
      await redis.client.call('FUNCTION', 'FLUSH');
      await redis.client.script('FLUSH');
      await sleep(50);
    }
    load.phase('after');
    await sleep(300);
    const stats = await redis.client.info('commandstats');
    // The library loaded again after FUNCTION FLUSH (or, where scripts are called, the script
    // sent again after NOSCRIPT).
    const loads =
      Number(/^cmdstat_function\|load:calls=(\d+)/m.exec(stats)?.[1] ?? 0) +
      Number(/^cmdstat_eval:calls=(\d+)/m.exec(stats)?.[1] ?? 0);
    const tallies = await load.stop(
      `FUNCTION FLUSH and SCRIPT FLUSH ${flushes} times, FAILURE_MODE=error; Redis saw ${loads} FUNCTION LOAD or EVAL`,
    );

    expect(loads).toBeGreaterThan(flushes / 2); // the code really was lost under the calls
    expect(load.tally('flushing').calls).toBeGreaterThan(100);
    expect(noscripts(tallies)).toEqual([]);
    for (const tally of all(tallies)) {
      expect(tally.kinds).toEqual({ OK: tally.calls, OVER_LIMIT: 0, UNAVAILABLE: 0, other: 0 });
      expect(tally.maxLatencyMs).toBeLessThan(BOUND_MS);
    }
    expectAlive(tollgate);
  });
});

describe('DEBUG SLEEP longer than REDIS_TIMEOUT under load', () => {
  it(`answers UNAVAILABLE within ${BOUND_MS} ms while Redis stalls 1.5 s, then recovers`, async () => {
    const tollgate = tollgateFor('error');
    const load = startLoad(tollgate.client, tenant);
    await sleep(500);
    load.phase('sleeping');
    await redis.client.call('DEBUG', 'SLEEP', '1.5');
    load.phase('waking');
    await sleep(500);
    load.phase('recovered');
    await sleep(500);
    const tallies = await load.stop('DEBUG SLEEP 1.5 (REDIS_TIMEOUT=200ms), FAILURE_MODE=error');

    expectRecovered(load.tally('before'));
    // Each caller waits out at least one timeout per call, so a few calls each in 1.5 s. After a
    // second of silence tollgate replaces the connection (see silentRedis.test.ts): calls then
    // fail at once until the new one is ready.
    const failed = all(tallies).reduce((sum, t) => sum + t.kinds.UNAVAILABLE, 0);
    expect(failed).toBeGreaterThanOrEqual(CALLERS * 2);
    const timedOut = all(tallies).flatMap((t) =>
      [...t.details].filter(([text]) => /timed out/.test(text)).map(([, n]) => n),
    );
    expect(timedOut.reduce((sum, n) => sum + n, 0)).toBeGreaterThanOrEqual(CALLERS * 2);
    for (const tally of all(tallies)) {
      for (const text of tally.details.keys()) {
        expect(text).toMatch(/timed out|not connected/);
      }
    }
    expectTransitions(tallies, ['before', 'recovered'], ['OK', 'UNAVAILABLE']);
    for (const tally of all(tallies)) expect(tally.maxLatencyMs).toBeLessThan(BOUND_MS);
    expectRecovered(load.tally('recovered'));
    expectAlive(tollgate);
  });
});

describe('a call made while an earlier one is stalled in Redis', () => {
  it(`answers within REDIS_TIMEOUT + 300 ms too (REDIS_TIMEOUT=${SLOW_TIMEOUT_MS}ms, DEBUG SLEEP 2 s)`, async () => {
    // Calls share one connection. With ioredis's auto-pipelining, which sends the next batch
    // only when the previous batch is answered, a call queued behind a stalled batch would wait
    // for that batch to time out before its own REDIS_TIMEOUT even started: this is why it is off.
    const tollgate = tollgateFor('slow');
    const sleeping = redis.client.call('DEBUG', 'SLEEP', '2');
    await sleep(100);
    const timed = async (delayMs: number) => {
      await sleep(delayMs);
      const started = performance.now();
      const code = await callCheck(tollgate.client, tenant(delayMs), 5_000).then(
        (response) => response.overall_code,
        (error: ServiceError) => grpcStatus[error.code],
      );
      return { delayMs, code, ms: performance.now() - started };
    };
    const calls = await Promise.all([0, 50, 100, 250].map(timed));
    await sleeping;
    console.log(
      `[faults] calls 0, 50, 100 and 250 ms into a DEBUG SLEEP, REDIS_TIMEOUT=${SLOW_TIMEOUT_MS}ms: ` +
        calls.map((c) => `${c.code} in ${c.ms.toFixed(0)} ms`).join(', '),
    );
    for (const call of calls) {
      expect(call.code).toBe('UNAVAILABLE');
      expect(call.ms, `the call made ${call.delayMs} ms in`).toBeLessThan(SLOW_TIMEOUT_MS + 300);
    }
    expectAlive(tollgate);
  });
});

describe('maxmemory reached with noeviction, under a flood of new keys', () => {
  it('answers a store error of kind out_of_memory, keeps running, and recovers when raised', async () => {
    const tollgate = tollgateFor('error');
    await redis.client.config('SET', 'maxmemory-policy', 'noeviction');
    const used = Number(/^used_memory:(\d+)/m.exec(await redis.client.info('memory'))?.[1]);
    await redis.client.config('SET', 'maxmemory', String(used + 256 * 1024));
    // Every call a new tenant, so every call writes a new key.
    const flood = (caller: number, i: number) => ({
      domain: 'faults',
      descriptors: [d('tenant', `flood-${caller}-${i}`)],
    });
    const load = startLoad(tollgate.client, flood);
    load.phase('filling');
    await eventually(async () => load.tally('filling').kinds.UNAVAILABLE > 0, 10_000);
    // Full for good: the cap goes to half of what Redis holds, so that its memory moving around
    // the cap (its buffers fuller, then emptier, on a busy machine) lets no write fit.
    const usedWhenFull = Number(/^used_memory:(\d+)/m.exec(await redis.client.info('memory'))?.[1]);
    await redis.client.config('SET', 'maxmemory', String(Math.floor(usedWhenFull / 2)));
    load.phase('full');
    await sleep(1_000);
    const keysWhenFull = await redis.client.dbsize();
    load.phase('raised');
    await redis.client.config('SET', 'maxmemory', '0');
    await sleep(300);
    load.phase('recovered');
    await sleep(500);
    const metrics = await (await fetch(`${tollgate.httpUrl}/metrics`)).text();
    const kinds = [...metrics.matchAll(/^tollgate_store_errors_total\{kind="([^"]+)"\} (\d+)/gm)];
    const tallies = await load.stop(
      `maxmemory = used_memory + 256 KB, then half of used_memory once full, noeviction, FAILURE_MODE=error; ${keysWhenFull} keys when full; ` +
        `tollgate_store_errors_total ${kinds.map((m) => `${m[1]}=${m[2]}`).join(', ')}`,
    );

    // Writes fail while Redis is full. With the cap just above what Redis held, some fitted again
    // as its memory moved around the cap: 7% to 80% failed, as busy as the machine was.
    const full = load.tally('full');
    expect(full.calls).toBeGreaterThan(50);
    expect(full.kinds.UNAVAILABLE).toBeGreaterThan(full.calls * 0.9);
    expectTransitions(tallies, ['recovered'], ['OK', 'UNAVAILABLE']);
    for (const tally of all(tallies)) {
      for (const text of tally.details.keys()) {
        expect(text).toMatch(
          /^UNAVAILABLE: store unavailable: redis: out of memory: OOM command not allowed/,
        );
      }
      expect(tally.maxLatencyMs).toBeLessThan(BOUND_MS);
    }
    expectRecovered(load.tally('recovered'));
    // The kind operators alert on, in the metrics (and the warning log): out_of_memory.
    const oom = kinds.find((m) => m[1] === 'out_of_memory');
    expect(Number(oom?.[2] ?? 0)).toBeGreaterThanOrEqual(full.kinds.UNAVAILABLE);
    expectAlive(tollgate);
  });
});
