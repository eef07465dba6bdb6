import type { Ghz } from './ghz.js';
import type { Measured } from './measure.js';
import type { Plan } from './plan.js';
import type { Counts } from './probes.js';
import { treeRssBytes } from './procstat.js';
import { DOMAIN } from './scenarios.js';

/**
 * The memory figure: a steady rate for a minute over many distinct keys, with tollgate's RSS
 * (every worker's) and Redis's keys and used_memory sampled as it runs. With the Redis store the
 * counters live in Redis, so tollgate's RSS must stay flat; with the in-memory store they live in
 * tollgate, and its growth per key is the figure.
 */
export interface MemorySample {
  atSeconds: number;
  rssBytes: number;
  redisKeys: number | null;
  redisUsedBytes: number | null;
}

export interface MemoryRun {
  service: string;
  seconds: number;
  offeredRps: number;
  achievedRps: number;
  requests: number;
  distinctKeys: number;
  statusCodes: Counts;
  rssBytes: { before: number; after: number; max: number };
  /** Redis's growth over the run and per key it gained; null for the in-memory store. */
  redis: {
    keysBefore: number;
    keysAfter: number;
    usedBytesBefore: number;
    usedBytesAfter: number;
    bytesPerKey: number;
  } | null;
  samples: MemorySample[];
}

/** Keys of their own, so that no other part of the bench touched them before. */
function memoryRequest(keys: number) {
  return {
    domain: DOMAIN,
    descriptors: [{ entries: [{ key: 'user', value: `m{{mod .RequestNumber ${keys}}}` }] }],
  };
}

async function redisMemory(target: Measured) {
  if (!target.redis) return null;
  const info = await target.redis.client.info();
  return {
    keys: Number(/^db0:keys=(\d+)/m.exec(info)?.[1] ?? 0),
    usedBytes: Number(/^used_memory:(\d+)/m.exec(info)?.[1]),
  };
}

export async function runMemory(
  ghz: Ghz,
  target: Measured,
  plan: Plan['memory'],
): Promise<MemoryRun> {
  const { service } = target;
  const started = performance.now();
  const samples: MemorySample[] = [];
  const sample = async () => {
    const redis = await redisMemory(target);
    samples.push({
      atSeconds: Math.round((performance.now() - started) / 100) / 10,
      rssBytes: treeRssBytes(service.pid),
      redisKeys: redis?.keys ?? null,
      redisUsedBytes: redis?.usedBytes ?? null,
    });
  };
  const redisBefore = await redisMemory(target);
  await sample();
  const run = ghz.run({
    address: service.address,
    request: memoryRequest(plan.keys),
    seconds: plan.seconds,
    rps: plan.rps,
    concurrency: 50,
    connections: 4,
    timeoutMs: 1_000,
  });
  let finished = false;
  void run.finally(() => (finished = true)).catch(() => {});
  while (!finished) {
    await new Promise((resolve) => setTimeout(resolve, plan.sampleSeconds * 1000));
    if (!finished) await sample();
  }
  const result = await run;
  await sample();
  const redisAfter = await redisMemory(target);
  const rss = samples.map((s) => s.rssBytes);
  return {
    service: service.name,
    seconds: result.totalSeconds,
    offeredRps: plan.rps,
    achievedRps: result.totalSeconds > 0 ? (result.statusCodes.OK ?? 0) / result.totalSeconds : 0,
    requests: result.count,
    distinctKeys: plan.keys,
    statusCodes: result.statusCodes,
    rssBytes: { before: rss[0]!, after: rss[rss.length - 1]!, max: Math.max(...rss) },
    redis:
      redisBefore && redisAfter
        ? {
            keysBefore: redisBefore.keys,
            keysAfter: redisAfter.keys,
            usedBytesBefore: redisBefore.usedBytes,
            usedBytesAfter: redisAfter.usedBytes,
            bytesPerKey:
              (redisAfter.usedBytes - redisBefore.usedBytes) /
              Math.max(1, redisAfter.keys - redisBefore.keys),
          }
        : null,
    samples,
  };
}
