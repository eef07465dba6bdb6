import { execFileSync } from 'node:child_process';
import { defineConfig } from 'vitest/config';
import base from './vitest.config.js';

/**
 * The store's integration suites on Valkey: `npm run test:valkey`. The tests start
 * TEST_REDIS_SERVER when it is set, else the valkey-server that scripts/valkey.sh puts into
 * .cache/. That build has no TLS, so the TLS tests skip themselves; they run on Redis in `npm test`.
 */
const server =
  process.env.TEST_REDIS_SERVER ||
  execFileSync('bash', ['scripts/valkey.sh'], { encoding: 'utf8' }).trim();

export default defineConfig({
  test: {
    // The timeouts, pool and global setup of `npm test`; these files only.
    ...base.test,
    include: [
      // Single node: the binary itself, both call paths, both scripts, batches, faults.
      'redisSupport',
      'fcall',
      'fixedWindowScript',
      'storeEquivalence',
      'batching',
      'badCounter',
      'overdrawPast',
      'redisFaults',
      'race',
      // Redis Functions: the library's life, and the upgrade from scripts.
      'functionsLibrary',
      'functionsUpgrade',
      // ACL users: README's line, each command refused, SELECT refused.
      'redisAcl',
      'health',
      'redisSelect',
      // Cluster and Sentinel.
      'cluster',
      'clusterFunctions',
      'clusterBatching',
      'refundNotices',
      'rlqsCluster',
      'sentinel',
      'rlqsSentinel',
    ].map((name) => `test/integration/${name}.test.ts`),
    env: { TEST_REDIS_SERVER: server },
  },
});
