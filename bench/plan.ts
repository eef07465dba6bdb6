import type { RlqsPlan } from './rlqs.js';
import type { RlqsBoundPlan } from './rlqsBound.js';
import type { Variant } from './variants.js';
import type { VersusPlan } from './versus.js';

/**
 * How long and how hard each part of the bench runs. `--quick` exists to prove the bench works
 * (in CI, in under three minutes), not to measure: its numbers are indicative only.
 */
export type Mode = 'quick' | 'full';

export interface Plan {
  mode: Mode;
  /** Closed loop: fixed concurrency, no rate limit; median of `rounds` alternating runs. */
  throughput: {
    seconds: number;
    warmupSeconds: number;
    rounds: number;
    concurrency: number;
    connections: number;
  };
  /** Constant arrival rate: one run per tier, stopping one tier past the break. */
  latency: {
    seconds: number;
    warmupSeconds: number;
    tiers: number[];
    concurrency: number;
    connections: number;
    /** Calls still waiting past this fail, which bounds what an overloaded tier leaves queued. */
    timeoutMs: number;
  };
  /** Every scenario on each tollgate: one closed-loop run and one run at `rps`. */
  scenarios: { throughputSeconds: number; latencySeconds: number; rps: number };
  /** The memory figure: a steady rate over `keys` distinct keys, sampled every few seconds. */
  memory: { seconds: number; rps: number; keys: number; sampleSeconds: number };
  /** Closed-loop throughput of the Redis store as shipped and with one lever changed. */
  variants: { variants: Variant[]; seconds: number; rounds: number };
  /** Side by side with envoyproxy/ratelimit (bench/versus.ts). */
  versus: VersusPlan;
  /** Concurrent requests to one limited key while ghz loads the service. */
  admission: { requests: number; concurrency: number; channels: number; loadSeconds: number };
  /** RLQS streams against classic checks, CPU per 1,000 requests (bench/rlqs.ts). */
  rlqs: RlqsPlan;
  /**
   * RLQS's over-admission bound over long runs (bench/rlqsBound.ts); under --quick a smoke run of
   * three scenarios on 2 s windows, which proves the mode works and judges nothing.
   */
  rlqsBound: RlqsBoundPlan;
}

/** A tier breaks when any of these holds; the next tier is the last one run. */
export const BREAK = { minAchievedRatio: 0.95, maxErrorRate: 0.01, maxP99Ms: 2 } as const;

/** 1k, 2k, 5k, 10k, then doubling; the cap only guarantees an end if nothing ever breaks. */
function tiers(count: number): number[] {
  const all = [1_000, 2_000, 5_000, 10_000];
  while (all.length < count) all.push(all[all.length - 1]! * 2);
  return all.slice(0, count);
}

export function makePlan(mode: Mode): Plan {
  const quick = mode === 'quick';
  return {
    mode,
    throughput: {
      seconds: quick ? 2 : 10,
      warmupSeconds: quick ? 1 : 3,
      rounds: 3,
      concurrency: 50,
      connections: 4,
    },
    latency: {
      seconds: quick ? 2 : 15,
      warmupSeconds: quick ? 0.5 : 2,
      tiers: quick ? tiers(3) : tiers(10),
      concurrency: 50,
      connections: 4,
      timeoutMs: 1_000,
    },
    scenarios: {
      throughputSeconds: quick ? 1 : 10,
      latencySeconds: quick ? 1 : 15,
      rps: quick ? 2_000 : 5_000,
    },
    memory: quick
      ? { seconds: 3, rps: 1_000, keys: 100_000, sampleSeconds: 1 }
      : { seconds: 60, rps: 2_000, keys: 100_000, sampleSeconds: 5 },
    variants: {
      variants: [
        { name: 'redis-default', label: 'as shipped', workers: 1, env: {} },
        { name: 'redis-w2', label: 'WORKERS=2', workers: 2, env: {} },
        {
          name: 'redis-unbatched',
          label: 'REDIS_BATCH_LIMIT=1',
          workers: 1,
          env: { REDIS_BATCH_LIMIT: '1' },
        },
        {
          name: 'redis-batch64',
          label: 'REDIS_BATCH_LIMIT=64',
          workers: 1,
          env: { REDIS_BATCH_LIMIT: '64' },
        },
        {
          name: 'redis-unix',
          label: 'REDIS_URL=unix://… (Redis over its Unix socket)',
          workers: 1,
          env: {},
          unixSocket: true,
        },
        {
          name: 'redis-semispace',
          label: 'NODE_OPTIONS=--max-semi-space-size=64',
          workers: 1,
          env: { NODE_OPTIONS: '--max-semi-space-size=64' },
        },
        {
          name: 'redis-abusive',
          label: 'as shipped, abusive tenant',
          workers: 1,
          env: {},
          scenario: 'abusive-tenant',
        },
        {
          name: 'redis-abusive-nocache',
          label: 'OVER_LIMIT_CACHE_SIZE=0, abusive tenant',
          workers: 1,
          env: { OVER_LIMIT_CACHE_SIZE: '0' },
          scenario: 'abusive-tenant',
        },
      ],
      seconds: quick ? 1 : 10,
      rounds: quick ? 1 : 3,
    },
    admission: { requests: 4_000, concurrency: 200, channels: 4, loadSeconds: quick ? 2 : 5 },
    rlqs: {
      seconds: quick ? 3 : 20,
      warmupSeconds: quick ? 1 : 3,
      rounds: quick ? 1 : 2,
      clients: quick ? 10 : 50,
      tenants: 5,
      clientRps: quick ? 100 : 200,
      reportingIntervalMs: 1_000,
      limitPerMinute: 100_000,
      classicRps: quick ? 1_000 : 3_000,
      idleSeconds: quick ? 1 : 5,
    },
    rlqsBound: quick
      ? {
          windowMs: 2_000,
          limit: 400,
          shapes: ['exact'],
          warmWindows: 1,
          measuredWindows: 1,
          only: ['solo', 'shared', 'defaults'],
          classicRps: 60,
        }
      : {
          windowMs: 10_000,
          limit: 2_000,
          shapes: ['released', 'filter-wide', 'exact'],
          warmWindows: 3,
          measuredWindows: 10,
          classicRps: 60,
        },
    versus: {
      closedSeconds: quick ? 1 : 10,
      warmupSeconds: quick ? 0.5 : 2,
      rounds: quick ? 1 : 3,
      // Under --quick, 1.25 s rather than 1.5: the floor with a Redis round trip costs the rest.
      tierSeconds: quick ? 1.25 : 8,
      tierRounds: quick ? 2 : 3,
      tiers: quick ? [1_000, 2_000, 3_000] : [1_000, 2_000, 3_000, 5_000, 10_000, 20_000],
      costRps: 3_000,
      concurrency: 50,
      connections: 4,
      timeoutMs: 1_000,
    },
  };
}
