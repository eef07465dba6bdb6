// The settings an operator sets through the environment: every default from BRIEF's table, each
// bad value stopping start-up with a message that names the setting, the accepted REDIS_URL forms
// and the reference's RUNTIME_ROOT layout.
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { SettingsError } from '../../src/core/errors.js';
import { ALLOW_UNSUPPORTED_NODE } from '../../src/core/nodeLines.js';
import { isKnownName } from '../../src/process/settingNames.js';
import { BUNDLED_RULES, readSettings, SETTING_NAMES } from '../../src/process/settings.js';
import { startupWarnings } from '../../src/process/startupReport.js';
import { createTracing } from '../../src/observability/tracing.js';

function failure(env: Record<string, string>): SettingsError {
  try {
    readSettings(env);
  } catch (error) {
    expect(error).toBeInstanceOf(SettingsError);
    return error as SettingsError;
  }
  return expect.unreachable(`readSettings accepted ${JSON.stringify(env)}`);
}

const URL = { REDIS_URL: 'redis://cache:6379' };

describe('readSettings defaults', () => {
  it('gives every default of the table for an empty environment', () => {
    const settings = readSettings({});
    expect(settings).toMatchObject({
      grpcHost: '0.0.0.0',
      grpcPort: 8081,
      host: '0.0.0.0',
      port: 8080,
      configPath: BUNDLED_RULES,
      failureMode: 'error',
      clock: 'redis',
      defaultAlgorithm: 'sliding_window',
      cacheKeyPrefix: '',
      shadowMode: false,
      quotaMode: false,
      rateLimitHeaders: 'ietf',
      maxDescriptors: 64,
      maxEntries: 16,
      maxEntryBytes: 1024,
      limitOverrides: true,
      workers: 1,
      logLevel: 'info',
      logFormat: 'json',
      mergeDomainConfig: false,
      configPollIntervalMs: 10_000,
      configSettleMs: 1_000,
      responseDynamicMetadata: false,
      limitHeaders: {
        enabled: false,
        limit: 'RateLimit-Limit',
        remaining: 'RateLimit-Remaining',
        reset: 'RateLimit-Reset',
      },
      metrics: { nearLimitRatio: 0.8, maxDetailedSeries: 1000 },
      grpcServer: {
        maxConnectionAgeMs: 86_400_000,
        maxConnectionAgeGraceMs: 3_600_000,
        maxConcurrentStreams: 100,
        maxConnections: 10_000,
        maxCalls: 5_000,
        maxReceivingBytes: 64 * 1024 * 1024,
        callTimeoutMs: 10_000,
        maxPeerResets: 1_000,
        keepaliveTimeMs: 7_200_000,
        keepaliveTimeoutMs: 20_000,
        tls: undefined,
      },
      http: {
        maxConnections: 1_000,
        headersTimeoutMs: 10_000,
        requestTimeoutMs: 30_000,
        json: 'auto',
      },
      shutdownGraceMs: 10_000,
      overLimitCacheSize: 10_000,
    });
    expect(settings.grpcUds).toBeUndefined();
    expect(settings.redis).toBeUndefined(); // no REDIS_URL: the in-memory store
  });

  it('gives the Redis defaults once REDIS_URL is set', () => {
    expect(readSettings(URL).redis).toMatchObject({
      type: 'single',
      host: 'cache',
      port: 6379,
      username: undefined,
      password: undefined,
      db: 0,
      tls: undefined,
      timeoutMs: 15,
    });
  });

  it('makes GRPC_CALL_TIMEOUT twice a REDIS_TIMEOUT over 5 s, so a call outlasts its Redis call', () => {
    expect(readSettings({ REDIS_TIMEOUT: '10s' }).grpcServer.callTimeoutMs).toBe(20_000);
    expect(readSettings({ REDIS_TIMEOUT: '1s' }).grpcServer.callTimeoutMs).toBe(10_000);
    expect(readSettings({ GRPC_CALL_TIMEOUT: '2s' }).grpcServer.callTimeoutMs).toBe(2_000);
  });

  it('serves ShouldRateLimit on the fast path unless GRPC_FAST_PATH is false', () => {
    expect(readSettings({}).grpcServer.fastPath).toBe(true);
    expect(readSettings({ GRPC_FAST_PATH: 'false' }).grpcServer.fastPath).toBe(false);
    expect(() => readSettings({ GRPC_FAST_PATH: 'sometimes' })).toThrow(/GRPC_FAST_PATH/);
  });

  it('reads HTTP_JSON in any case', () => {
    expect(readSettings({ HTTP_JSON: 'ON' }).http.json).toBe('on');
  });

  it('reads every setting with named values in any case', () => {
    const settings = readSettings({
      ...URL,
      FAILURE_MODE: 'Allow',
      CLOCK: 'LOCAL',
      DEFAULT_ALGORITHM: 'Token_Bucket',
      RATELIMIT_HEADERS: 'NONE',
      COMPAT_MODE: 'Reference',
      REDIS_TYPE: 'Single',
      REDIS_SOCKET_TYPE: 'TCP',
      CONFIG_TYPE: 'File',
      HTTP_JSON: 'On',
    });
    expect(settings).toMatchObject({
      failureMode: 'allow',
      clock: 'local',
      defaultAlgorithm: 'token_bucket',
      rateLimitHeaders: 'none',
      compatMode: 'reference',
      xds: undefined,
    });
  });

  it("reads XDS_CLIENT_MAX_MSG_SIZE_IN_BYTES=0 as the reference does: gRPC's default", () => {
    const xds = (value?: string) =>
      readSettings({
        CONFIG_TYPE: 'GRPC_XDS_SOTW',
        ...(value === undefined ? {} : { XDS_CLIENT_MAX_MSG_SIZE_IN_BYTES: value }),
      }).xds?.maxMessageBytes;
    expect(xds()).toBeUndefined();
    expect(xds('0')).toBeUndefined();
    expect(xds('1048576')).toBe(1048576);
    expect(() => xds('-1')).toThrow(/XDS_CLIENT_MAX_MSG_SIZE_IN_BYTES/);
  });

  it('reads empty values as unset', () => {
    expect(readSettings({ GRPC_PORT: '', FAILURE_MODE: '', SHADOW_MODE: '' })).toMatchObject({
      grpcPort: 8081,
      failureMode: 'error',
      shadowMode: false,
    });
  });
});

describe('readSettings rejects a bad value, naming the setting', () => {
  it.each([
    [{ GRPC_PORT: 'abc' }, "GRPC_PORT: 'abc' is not a whole number from 0 to 65535"],
    [{ GRPC_PORT: '65536' }, "GRPC_PORT: '65536' is not a whole number from 0 to 65535"],
    [{ PORT: '-1' }, "PORT: '-1' is not a whole number from 0 to 65535"],
    [
      { ...URL, REDIS_TIMEOUT: 'soon' },
      "REDIS_TIMEOUT: 'soon' is not a duration such as 15ms or 1s (invalid duration 'soon': expected a number at 'soon')",
    ],
    [{ ...URL, REDIS_TIMEOUT: '0' }, "REDIS_TIMEOUT: '0' must be at least 1ms"],
    [{ ...URL, REDIS_TIMEOUT: '0s' }, "REDIS_TIMEOUT: '0s' must be at least 1ms"],
    [{ FAILURE_MODE: 'open' }, "FAILURE_MODE: 'open' is not one of error, deny, allow"],
    [{ CLOCK: 'ntp' }, "CLOCK: 'ntp' is not one of redis, local"],
    [
      { DEFAULT_ALGORITHM: 'leaky_bucket' },
      "DEFAULT_ALGORITHM: 'leaky_bucket' is not one of sliding_window, token_bucket, fixed_window",
    ],
    [
      { ...URL, REDIS_TYPE: 'replica' },
      "REDIS_TYPE: 'replica' is not one of single, sentinel, cluster",
    ],
    [{ ...URL, REDIS_TLS: 'maybe' }, "REDIS_TLS: 'maybe' is not true or false"],
    [{ SHADOW_MODE: 'maybe' }, "SHADOW_MODE: 'maybe' is not true or false"],
    [{ MAX_DESCRIPTORS: '0' }, "MAX_DESCRIPTORS: '0' is not a whole number from 1 to 100000"],
    [{ MAX_DESCRIPTORS: '1.5' }, "MAX_DESCRIPTORS: '1.5' is not a whole number from 1 to 100000"],
    [
      { CACHE_KEY_PREFIX: 'tenant{a' },
      'CACHE_KEY_PREFIX: may not contain { or }, which Redis reads as a hash tag',
    ],
    [
      { CACHE_KEY_PREFIX: 'x}' },
      'CACHE_KEY_PREFIX: may not contain { or }, which Redis reads as a hash tag',
    ],
    [{ WORKERS: '2' }, 'WORKERS: more than 1 needs REDIS_URL, since workers share no memory'],
    [{ REDIS_URL: 'http://cache:6379' }, "REDIS_URL: scheme 'http:' is not redis: or rediss:"],
    [{ REDIS_URL: 'redis://cache:6379/zero' }, "REDIS_URL: database 'zero' is not a number"],
    [{ NEAR_LIMIT_RATIO: '1.5' }, "NEAR_LIMIT_RATIO: '1.5' is not a number from 0 to 1"],
    [{ NEAR_LIMIT_RATIO: 'most' }, "NEAR_LIMIT_RATIO: 'most' is not a number from 0 to 1"],
    [{ MERGE_DOMAIN_CONFIG: 'maybe' }, "MERGE_DOMAIN_CONFIG: 'maybe' is not true or false"],
    [{ CONFIG_POLL_INTERVAL: '5ms' }, "CONFIG_POLL_INTERVAL: '5ms' must be at least 100ms"],
    [
      { GRPC_MAX_CONNECTION_AGE: 'forever' },
      "GRPC_MAX_CONNECTION_AGE: 'forever' is not a duration such as 15ms or 1s (invalid duration 'forever': expected a number at 'forever')",
    ],
    [
      { GRPC_SERVER_USE_TLS: 'true', GRPC_SERVER_TLS_CERT: 'cert.pem' },
      'GRPC_SERVER_USE_TLS: true needs GRPC_SERVER_TLS_CERT and GRPC_SERVER_TLS_KEY',
    ],
    [
      { LIMIT_RESPONSE_HEADERS_ENABLED: 'yes please' },
      "LIMIT_RESPONSE_HEADERS_ENABLED: 'yes please' is not true or false",
    ],
    [
      { LIMIT_OVERRIDES_ENABLED: 'sometimes' },
      "LIMIT_OVERRIDES_ENABLED: 'sometimes' is not true or false",
    ],
    [
      { GRPC_MAX_CONNECTIONS: '0' },
      "GRPC_MAX_CONNECTIONS: '0' is not a whole number from 1 to 1000000",
    ],
    [{ GRPC_MAX_CALLS: 'many' }, "GRPC_MAX_CALLS: 'many' is not a whole number from 1 to 1000000"],
    [
      { GRPC_MAX_PEER_RESETS: '-1' },
      "GRPC_MAX_PEER_RESETS: '-1' is not a whole number from 0 to 1000000000",
    ],
    [
      { GRPC_MAX_RECEIVING_BYTES: '64MB' },
      "GRPC_MAX_RECEIVING_BYTES: '64MB' is not a whole number from 1 to 1099511627776",
    ],
    [
      { REDIS_TIMEOUT: '10s', GRPC_CALL_TIMEOUT: '5s' },
      "GRPC_CALL_TIMEOUT: '5s' must be longer than REDIS_TIMEOUT (10000ms), which a call may spend in Redis",
    ],
    [
      { HTTP_HEADERS_TIMEOUT: 'later' },
      "HTTP_HEADERS_TIMEOUT: 'later' is not a duration such as 15ms or 1s (invalid duration 'later': expected a number at 'later')",
    ],
    [{ HTTP_JSON: 'maybe' }, "HTTP_JSON: 'maybe' is not one of auto, on, off"],
    [
      { HTTP_HEADERS_TIMEOUT: '1m' },
      'HTTP_HEADERS_TIMEOUT: 60000ms is longer than HTTP_REQUEST_TIMEOUT (30000ms), which includes the headers',
    ],
  ])('%j', (env, message) => {
    expect(failure(env).message).toBe(message);
  });
});

describe('log settings', () => {
  it("read the reference's upper-case values", () => {
    expect(readSettings({ LOG_LEVEL: 'WARN', LOG_FORMAT: 'TEXT' })).toMatchObject({
      logLevel: 'warn',
      logFormat: 'text',
    });
  });
});

describe('REDIS_URL forms', () => {
  it('reads redis://user:pass@host:port/db', () => {
    expect(readSettings({ REDIS_URL: 'redis://user:pass@h:1234/2' }).redis).toMatchObject({
      host: 'h',
      port: 1234,
      username: 'user',
      password: 'pass',
      db: 2,
      tls: undefined,
    });
  });

  it('turns TLS on for rediss://', () => {
    expect(readSettings({ REDIS_URL: 'rediss://h:6380' }).redis).toMatchObject({
      host: 'h',
      port: 6380,
      tls: {
        caPath: undefined,
        clientCertPath: undefined,
        clientKeyPath: undefined,
        skipHostnameVerification: false,
      },
    });
  });

  it("reads the reference's bare host:port", () => {
    expect(readSettings({ REDIS_URL: 'cache.internal:6380' }).redis).toMatchObject({
      host: 'cache.internal',
      port: 6380,
      db: 0,
      tls: undefined,
      username: undefined,
      password: undefined,
    });
  });

  it('takes REDIS_AUTH as a password or as user:password', () => {
    expect(readSettings({ REDIS_URL: 'h:1', REDIS_AUTH: 'pass' }).redis).toMatchObject({
      username: undefined,
      password: 'pass',
    });
    expect(readSettings({ REDIS_URL: 'h:1', REDIS_AUTH: 'user:pa:ss' }).redis).toMatchObject({
      username: 'user',
      password: 'pa:ss',
    });
  });

  it('turns TLS on with REDIS_TLS=true', () => {
    expect(readSettings({ REDIS_URL: 'h:1', REDIS_TLS: 'true' }).redis?.tls).toBeDefined();
    expect(readSettings({ REDIS_URL: 'redis://h:1', REDIS_TLS: 'true' }).redis?.tls).toBeDefined();
  });

  it('reads REDIS_TYPE in any case', () => {
    expect(readSettings({ ...URL, REDIS_TYPE: 'SINGLE' }).redis?.type).toBe('single');
    expect(readSettings({ ...URL, REDIS_TYPE: 'Single' }).redis?.type).toBe('single');
  });

  it('reads REDIS_TIMEOUT as a duration', () => {
    expect(readSettings({ ...URL, REDIS_TIMEOUT: '1s' }).redis?.timeoutMs).toBe(1000);
    expect(readSettings({ ...URL, REDIS_TIMEOUT: '20ms' }).redis?.timeoutMs).toBe(20);
  });
});

describe('REDIS_TYPE=cluster', () => {
  const cluster = (url: string, env: Record<string, string> = {}) =>
    readSettings({ REDIS_TYPE: 'cluster', REDIS_URL: url, ...env }).redis;

  it('reads a comma-separated list of redis:// nodes', () => {
    expect(cluster('redis://h1:7000,redis://h2:7001,redis://[::1]:7002')).toEqual({
      type: 'cluster',
      host: 'h1',
      port: 7000,
      nodes: [
        { host: 'h1', port: 7000 },
        { host: 'h2', port: 7001 },
        { host: '::1', port: 7002 },
      ],
      username: undefined,
      password: undefined,
      db: 0,
      tls: undefined,
      timeoutMs: 15,
    });
  });

  it("reads the reference's bare host:port nodes, spaces allowed, 6379 by default", () => {
    expect(cluster('h1:7000, h2')?.nodes).toEqual([
      { host: 'h1', port: 7000 },
      { host: 'h2', port: 6379 },
    ]);
  });

  it('takes credentials from the nodes that give them, or REDIS_AUTH', () => {
    expect(cluster('redis://user:pa%40ss@h1:1,h2:2')).toMatchObject({
      username: 'user',
      password: 'pa@ss',
    });
    expect(cluster('h1:1,h2:2', { REDIS_AUTH: 'user:pass' })).toMatchObject({
      username: 'user',
      password: 'pass',
    });
  });

  it('turns TLS on for rediss:// nodes or REDIS_TLS=true', () => {
    expect(cluster('rediss://h1:1,rediss://h2:2')?.tls).toBeDefined();
    expect(cluster('h1:1,h2:2', { REDIS_TLS: 'true' })?.tls).toBeDefined();
  });

  it('reads REDIS_TYPE in any case', () => {
    expect(readSettings({ REDIS_TYPE: 'CLUSTER', REDIS_URL: 'h1:1' }).redis?.type).toBe('cluster');
  });

  it.each([
    [
      'h1:1,',
      "REDIS_URL: 'h1:1,' is not a comma-separated list of redis://[user:pass@]host:port or host:port",
    ],
    [
      'redis://h1:1,rediss://h2:2',
      "REDIS_URL: mixes redis:// and rediss:// nodes ('redis://h1:1,rediss://h2:2')",
    ],
    [
      'redis://h1:1/2,redis://h2:2',
      "REDIS_URL: Redis Cluster has only database 0, not 2 ('redis://h1:1/2,redis://h2:2')",
    ],
    ['redis://a:x@h1:1,redis://b:y@h2:2', 'REDIS_URL: the nodes give different credentials'],
    ['http://h1:1', "REDIS_URL: scheme 'http:' is not redis: or rediss:"],
    [
      'redis+sentinel://h1:1/m',
      "REDIS_URL: a sentinel URL needs REDIS_TYPE=sentinel ('redis+sentinel://h1:1/m')",
    ],
  ])('rejects %s', (url, message) => {
    expect(failure({ REDIS_TYPE: 'cluster', REDIS_URL: url }).message).toBe(message);
  });
});

describe('REDIS_TYPE=sentinel', () => {
  const sentinel = (url: string, env: Record<string, string> = {}) =>
    readSettings({ REDIS_TYPE: 'sentinel', REDIS_URL: url, ...env }).redis;

  it('reads redis+sentinel://[user:pass@]host:port,host:port/MASTER_NAME', () => {
    expect(sentinel('redis+sentinel://user:pass@s1:26380,s2/mymaster')).toEqual({
      type: 'sentinel',
      host: 's1',
      port: 26380,
      nodes: [
        { host: 's1', port: 26380 },
        { host: 's2', port: 26379 },
      ],
      masterName: 'mymaster',
      username: 'user',
      password: 'pass',
      db: 0,
      tls: undefined,
      timeoutMs: 15,
    });
  });

  it("reads the reference's MASTER_NAME,host:port,host:port with REDIS_AUTH", () => {
    expect(sentinel('mymaster,s1:26380, s2:26381', { REDIS_AUTH: 'secret' })).toMatchObject({
      nodes: [
        { host: 's1', port: 26380 },
        { host: 's2', port: 26381 },
      ],
      masterName: 'mymaster',
      username: undefined,
      password: 'secret',
    });
  });

  it('turns TLS on for rediss+sentinel:// or REDIS_TLS=true', () => {
    expect(sentinel('rediss+sentinel://s1:1/m')?.tls).toBeDefined();
    expect(sentinel('m,s1:1', { REDIS_TLS: 'true' })?.tls).toBeDefined();
    expect(sentinel('redis+sentinel://s1:1/m')?.tls).toBeUndefined();
  });

  it('reads REDIS_TYPE in any case', () => {
    expect(readSettings({ REDIS_TYPE: 'Sentinel', REDIS_URL: 'm,s1:1' }).redis?.type).toBe(
      'sentinel',
    );
  });

  const FORM =
    'redis+sentinel://[user:pass@]host:port,host:port/MASTER_NAME or MASTER_NAME,host:port,host:port';
  it.each([
    [
      'redis+sentinel://s1:1,s2:2',
      `REDIS_URL: 'redis+sentinel://s1:1,s2:2' names no master (${FORM})`,
    ],
    ['redis+sentinel://s1:1/', `REDIS_URL: 'redis+sentinel://s1:1/' names no master (${FORM})`],
    [
      'redis+sentinel://s1:1/m/2',
      `REDIS_URL: 'redis+sentinel://s1:1/m/2' names no master (${FORM})`,
    ],
    [
      's1:26379,s2:26379',
      `REDIS_URL: 's1:26379,s2:26379' starts with 's1:26379', not the master's name (${FORM})`,
    ],
    ['mymaster', `REDIS_URL: 'mymaster' has no sentinel (${FORM})`],
    ['mymaster,s1:port', `REDIS_URL: sentinel 's1:port' is not host:port (${FORM})`],
    ['redis+sentinel://s1:1,,s2:2/m', `REDIS_URL: sentinel '' is not host:port (${FORM})`],
    ['redis://s1:1', `REDIS_URL: scheme 'redis:' is not redis+sentinel: (${FORM})`],
  ])('rejects %s', (url, message) => {
    expect(failure({ REDIS_TYPE: 'sentinel', REDIS_URL: url }).message).toBe(message);
  });
});

describe('REDIS_TYPE=single', () => {
  it.each([
    ['h1:1,h2:2', "REDIS_URL: a list of nodes needs REDIS_TYPE=cluster ('h1:1,h2:2')"],
    [
      'redis+sentinel://s1:1/m',
      "REDIS_URL: a sentinel URL needs REDIS_TYPE=sentinel ('redis+sentinel://s1:1/m')",
    ],
  ])('rejects %s, naming the REDIS_TYPE it needs', (url, message) => {
    expect(failure({ REDIS_URL: url }).message).toBe(message);
  });
});

describe('a Redis Unix socket', () => {
  it.each([
    [{ REDIS_URL: 'unix:///run/redis/redis.sock' }, '/run/redis/redis.sock', 0],
    [{ REDIS_URL: 'unix:/run/redis.sock?db=3' }, '/run/redis.sock', 3],
    [
      { REDIS_URL: '/var/run/nutcracker/ratelimit.sock', REDIS_SOCKET_TYPE: 'unix' },
      '/var/run/nutcracker/ratelimit.sock',
      0,
    ],
  ])('reads %o', (env, path, db) => {
    expect(readSettings(env).redis).toMatchObject({ type: 'single', path, db });
  });

  it('takes credentials from REDIS_AUTH', () => {
    const env = { REDIS_URL: 'unix:///run/redis.sock', REDIS_AUTH: 'user:secret' };
    expect(readSettings(env).redis).toMatchObject({ username: 'user', password: 'secret' });
  });

  it.each([
    [
      { REDIS_URL: 'unix://relative.sock' },
      "REDIS_URL: 'unix://relative.sock' is not a Unix socket such as unix:///run/redis.sock[?db=N]",
    ],
    [
      { REDIS_URL: 'h:1', REDIS_SOCKET_TYPE: 'unix' },
      "REDIS_URL: 'h:1' is not a Unix socket such as unix:///run/redis.sock[?db=N]",
    ],
    [
      { REDIS_URL: 'h:1', REDIS_SOCKET_TYPE: 'pipe' },
      "REDIS_SOCKET_TYPE: 'pipe' is not one of tcp, unix",
    ],
    [
      { REDIS_URL: 'unix:///run/redis.sock', REDIS_TYPE: 'cluster' },
      "REDIS_URL: a Unix socket needs REDIS_TYPE=single ('unix:///run/redis.sock')",
    ],
  ])('rejects %o', (env, message) => {
    expect(failure(env).message).toBe(message);
  });
});

describe('the rules location', () => {
  it("uses the reference's RUNTIME_ROOT layout when CONFIG_PATH is unset", () => {
    const env = {
      RUNTIME_ROOT: '/srv/runtime',
      RUNTIME_SUBDIRECTORY: 'ratelimit',
      RUNTIME_APPDIRECTORY: 'rules',
    };
    expect(readSettings(env).configPath).toBe(join('/srv/runtime', 'ratelimit', 'rules'));
    expect(readSettings({ RUNTIME_ROOT: '/srv/runtime' }).configPath).toBe(
      join('/srv/runtime', 'config'),
    );
  });

  it('lets CONFIG_PATH win over RUNTIME_ROOT', () => {
    const env = { RUNTIME_ROOT: '/srv/runtime', CONFIG_PATH: '/etc/tollgate/rules.yaml' };
    expect(readSettings(env).configPath).toBe('/etc/tollgate/rules.yaml');
  });
});

describe('a bad setting that holds a password', () => {
  const PASSWORD = 'S3cretPW';
  it.each([
    [{ REDIS_URL: `redis://tollgate:${PASSWORD}@h1:7000,redis://tollgate:${PASSWORD}@h2:7000` }],
    [{ REDIS_URL: `redis+sentinel://tollgate:${PASSWORD}@s1:26379,s2:26379/main` }],
    [{ REDIS_TYPE: 'cluster', REDIS_URL: `redis://tollgate:${PASSWORD}@h1:7000/2` }],
    [{ REDIS_TYPE: 'cluster', REDIS_URL: `rediss://tollgate:${PASSWORD}@h1:7000,redis://h2:7000` }],
    [{ REDIS_TYPE: 'cluster', REDIS_URL: `unix:///run/redis.sock,redis://tollgate:${PASSWORD}@h` }],
    [
      {
        REDIS_TYPE: 'sentinel',
        REDIS_URL: `redis+sentinel://tollgate:${PASSWORD}@s1:26379,s2:26379`,
      },
    ],
    [{ REDIS_TYPE: 'sentinel', REDIS_URL: `redis+sentinel://tollgate:${PASSWORD}@s1:26379/` }],
    [{ REDIS_TYPE: 'sentinel', REDIS_URL: `redis+sentinel://tollgate:${PASSWORD}@s1:x:y/main` }],
    [{ REDIS_URL: `redis://tollgate:${PASSWORD}@` }],
    [{ REDIS_URL: `redis://tollgate:${PASSWORD}@cache:6379/zero` }],
    [{ REDIS_URL: `redis://tollgate:p@${PASSWORD}@cache:bad` }],
    [{ REDIS_URL: `redis://tollgate:${encodeURIComponent('p/ss:' + PASSWORD)}@` }],
    [{ REDIS_AUTH: `tollgate:${PASSWORD}`, REDIS_URL: 'cache:6379,other:6379' }],
    [{ REDIS_AUTH: `tollgate:${PASSWORD}`, REDIS_TYPE: 'sentinel', REDIS_URL: 'main' }],
    [{ OTEL_EXPORTER_OTLP_ENDPOINT: `ftp://tollgate:${PASSWORD}@collector` }],
    [
      {
        OTEL_EXPORTER_OTLP_ENDPOINT: 'http://collector:4318',
        OTEL_EXPORTER_OTLP_HEADERS: `authorization=Bearer%20${PASSWORD},broken`,
      },
    ],
  ])('%j: the message never holds it', (env) => {
    let message = '';
    try {
      readSettings(env);
      createTracing({ env });
    } catch (error) {
      message = (error as Error).message;
    }
    expect(message).not.toBe('');
    expect(message).not.toContain(PASSWORD);
  });

  it('still quotes the rest of the URL, for the operator to find the fault', () => {
    expect(failure({ REDIS_URL: `redis://tollgate:${PASSWORD}@h1:1,redis://h2:2` }).message).toBe(
      "REDIS_URL: a list of nodes needs REDIS_TYPE=cluster ('redis://tollgate:***@h1:1,redis://h2:2')",
    );
  });
});

describe('COMPAT_MODE=reference', () => {
  it("takes the reference's defaults: fixed windows, no IETF headers, no over-limit cache", () => {
    expect(readSettings({ COMPAT_MODE: 'reference' })).toMatchObject({
      compatMode: 'reference',
      defaultAlgorithm: 'fixed_window',
      rateLimitHeaders: 'none',
      overLimitCacheSize: 0,
      stopIncrementWhenOverLimit: false,
    });
    expect(readSettings({})).toMatchObject({
      compatMode: 'off',
      defaultAlgorithm: 'sliding_window',
      rateLimitHeaders: 'ietf',
      overLimitCacheSize: 10_000,
    });
  });

  it('keeps what is set explicitly, and turns the cache on with LOCAL_CACHE_SIZE_IN_BYTES', () => {
    expect(
      readSettings({
        COMPAT_MODE: 'REFERENCE',
        DEFAULT_ALGORITHM: 'token_bucket',
        RATELIMIT_HEADERS: 'ietf',
        LOCAL_CACHE_SIZE_IN_BYTES: '1048576',
        STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT: 'true',
      }),
    ).toMatchObject({
      defaultAlgorithm: 'token_bucket',
      rateLimitHeaders: 'ietf',
      overLimitCacheSize: 10_000,
      stopIncrementWhenOverLimit: true,
    });
    expect(failure({ COMPAT_MODE: 'go' }).message).toMatch(/^COMPAT_MODE: 'go'/);
    expect(
      failure({ COMPAT_MODE: 'reference', LOCAL_CACHE_SIZE_IN_BYTES: 'lots' }).message,
    ).toMatch(/^LOCAL_CACHE_SIZE_IN_BYTES: 'lots'/);
  });
});

describe('COMPAT_KEYS=reference', () => {
  const shared = { COMPAT_MODE: 'reference', COMPAT_KEYS: 'reference', REDIS_URL: 'cache:6379' };

  it("counts on the reference's keys, on this instance's clock, with its jitter and without RLQS", () => {
    expect(readSettings(shared)).toMatchObject({
      clock: 'local',
      rlqs: undefined,
      referenceKeys: { jitterMaxSeconds: 300 },
    });
    expect(
      readSettings({ ...shared, EXPIRATION_JITTER_MAX_SECONDS: '0', RLQS_ENABLED: 'false' }),
    ).toMatchObject({ referenceKeys: { jitterMaxSeconds: 0 } });
    expect(readSettings({ COMPAT_MODE: 'reference' }).referenceKeys).toBeUndefined();
  });

  it('refuses, naming why, whatever would count elsewhere or otherwise than the reference', () => {
    const refusals: [Record<string, string>, RegExp][] = [
      [{ COMPAT_KEYS: 'reference', REDIS_URL: 'cache:6379' }, /needs COMPAT_MODE=reference/],
      [{ COMPAT_MODE: 'reference', COMPAT_KEYS: 'reference' }, /needs REDIS_URL/],
      [{ ...shared, CLOCK: 'redis' }, /needs CLOCK=local/],
      [{ ...shared, DEFAULT_ALGORITHM: 'token_bucket' }, /fixed windows only/],
      [{ ...shared, REDIS_PERSECOND: 'true' }, /REDIS_PERSECOND_URL/],
      [{ ...shared, RLQS_ENABLED: 'true' }, /RLQS charges tollgate's own counters/],
      [{ ...shared, COMPAT_KEYS: 'go' }, /^COMPAT_KEYS: 'go'/],
    ];
    for (const [env, message] of refusals) {
      expect(failure(env).message, JSON.stringify(env)).toMatch(message);
    }
  });
});

describe('statsd settings', () => {
  it('are off unless USE_STATSD=true, with the reference defaults otherwise', () => {
    expect(readSettings({}).statsd).toBeUndefined();
    expect(readSettings({ STATSD_HOST: 'stats' }).statsd).toBeUndefined();
    expect(readSettings({ USE_STATSD: 'true' }).statsd).toEqual({
      host: 'localhost',
      port: 8125,
      protocol: 'tcp',
      flushIntervalMs: 10_000,
      extraTags: {},
    });
  });

  it('read EXTRA_TAGS as key:value pairs, and refuse a bad protocol or pair', () => {
    expect(
      readSettings({ USE_STATSD: 'true', EXTRA_TAGS: 'a:1, b:two:parts', STATSD_PROTOCOL: 'UDP' })
        .statsd,
    ).toMatchObject({ protocol: 'udp', extraTags: { a: '1', b: 'two:parts' } });
    expect(failure({ USE_STATSD: 'true', EXTRA_TAGS: 'a:1,b' }).message).toMatch(
      /^EXTRA_TAGS: 'b' is not key:value/,
    );
    expect(failure({ USE_STATSD: 'true', STATSD_PROTOCOL: 'quic' }).message).toMatch(
      /^STATSD_PROTOCOL: 'quic'/,
    );
  });

  it("are not read while statsd is off: a Service named statsd's link does not stop start-up", () => {
    // What the kubelet injects for a Service named statsd in the namespace.
    const link = {
      STATSD_PORT: 'tcp://10.0.0.1:8125',
      STATSD_PORT_8125_TCP: 'tcp://10.0.0.1:8125',
      STATSD_SERVICE_HOST: '10.0.0.1',
      STATSD_SERVICE_PORT: '8125',
    };
    expect(readSettings(link).statsd).toBeUndefined();
    expect(readSettings({ ...link, USE_STATSD: 'false' }).statsd).toBeUndefined();
    expect(failure({ ...link, USE_STATSD: 'true' }).message).toBe(
      "STATSD_PORT: 'tcp://10.0.0.1:8125' is not a whole number from 1 to 65535 (a Kubernetes " +
        "service link's value: a Service of that name injects it; set the value explicitly, or " +
        'enableServiceLinks: false in the pod spec)',
    );
  });
});

describe('reference settings that ask for what tollgate has not', () => {
  it('refuses BACKEND_TYPE other than redis, naming what works', () => {
    for (const value of ['memcache', 'MEMCACHE', 'cassandra']) {
      expect(failure({ ...URL, BACKEND_TYPE: value }).message).toBe(
        `BACKEND_TYPE: '${value}' is not a store tollgate has: counters are in Redis ` +
          '(REDIS_URL, with BACKEND_TYPE=redis or unset) or, with neither set, in this process',
      );
    }
  });

  it('refuses BACKEND_TYPE=redis without REDIS_URL, and takes it with one', () => {
    expect(failure({ BACKEND_TYPE: 'redis' }).message).toBe(
      'BACKEND_TYPE: redis needs REDIS_URL: without it the counters would be in this process ' +
        'only; set REDIS_URL, or unset BACKEND_TYPE for the in-memory store',
    );
    expect(readSettings({ ...URL, BACKEND_TYPE: 'Redis' }).redis?.host).toBe('cache');
    expect(readSettings({ BACKEND_TYPE: '' }).redis).toBeUndefined();
  });

  it('refuses USE_DOG_STATSD=true, and takes false', () => {
    expect(failure({ USE_DOG_STATSD: 'on' }).message).toMatch(
      /^USE_DOG_STATSD: tollgate sends no DogStatsD: unset it, and scrape GET \/metrics/,
    );
    expect(readSettings({ USE_DOG_STATSD: 'false' }).statsd).toBeUndefined();
    expect(failure({ USE_DOG_STATSD: 'dog' }).message).toBe(
      "USE_DOG_STATSD: 'dog' is not true or false",
    );
  });
});

/** The rows of the settings tables: docs/settings.md's, and the xDS settings' in docs/rules.md. */
function settingRows(settingsPart: (text: string) => string = (text) => text): string[][] {
  const text = settingsPart(readFileSync('docs/settings.md', 'utf8'));
  const xds = readFileSync('docs/rules.md', 'utf8');
  return [...text.split('\n'), ...xds.split('\n')]
    .filter((line) => line.startsWith('| `'))
    .map((line) => line.split('|').map((cell) => cell.trim()));
}

const namesIn = (cell: string) =>
  [...cell.matchAll(/`([A-Z][A-Z0-9_]*)`/g)].map((match) => match[1] as string);

describe('booleans', () => {
  // Every boolean setting the docs document, with what turns its feature on, so that it is read.
  const FEATURES = {
    CONFIG_TYPE: 'GRPC_XDS_SOTW',
    USE_STATSD: 'true',
    GRPC_SERVER_TLS_CERT: 'cert.pem',
    GRPC_SERVER_TLS_KEY: 'key.pem',
    ...URL,
  };
  // The main table: the one before the section on refusals.
  const rows = settingRows((text) => text.split('## What start-up refuses')[0] ?? '');
  const booleans = rows.flatMap(([, names = '', defaults = '']) => {
    const defaultList = defaults.split(',').map((value) => value.trim());
    return namesIn(names).filter((_, i) =>
      /^`(true|false)`/.test(defaultList[i] ?? defaultList[0] ?? ''),
    );
  });

  it('are found in the docs', () => {
    expect(booleans).toEqual(
      expect.arrayContaining(['SHADOW_MODE', 'USE_STATSD', 'REDIS_TLS', 'XDS_REFUSE_EMPTY_UPDATE']),
    );
    expect(booleans.length).toBeGreaterThan(20);
  });
  it('each takes true, false, 1, 0, yes, no, on and off in any case, and refuses anything else naming itself', () => {
    const read = booleans.filter(
      (name) => name !== 'USE_DOG_STATSD' && (SETTING_NAMES as readonly string[]).includes(name),
    );
    expect(read.length).toBe(booleans.length - 2);
    for (const name of read) {
      for (const word of ['true', 'FALSE', '1', '0', 'Yes', 'nO', 'ON', 'off']) {
        expect(() => readSettings({ ...FEATURES, [name]: word }), `${name}=${word}`).not.toThrow();
      }
      for (const word of ['y', 'enabled', 'truthy', '2']) {
        expect(failure({ ...FEATURES, [name]: word }).message).toBe(
          `${name}: '${word}' is not true or false`,
        );
      }
    }
  });

  it('mean what they say: USE_STATSD=on turns statsd on, SHADOW_MODE=No leaves it off', () => {
    expect(readSettings({ USE_STATSD: 'on' }).statsd).toBeDefined();
    expect(readSettings({ USE_STATSD: 'Yes' }).statsd).toBeDefined();
    expect(readSettings({ SHADOW_MODE: 'No' }).shadowMode).toBe(false);
    expect(readSettings({ STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT: 'yes' })).toMatchObject({
      stopIncrementWhenOverLimit: true,
    });
  });
});

describe('the names of settings', () => {
  it('holds every name docs/settings.md documents, and the docs document every one tollgate reads', () => {
    const documented = new Set(settingRows().flatMap(([, names = '']) => namesIn(names)));
    expect(documented.size).toBeGreaterThan(100);
    expect([...documented].filter((name) => !isKnownName(name))).toEqual([]);
    expect(SETTING_NAMES.filter((name) => !documented.has(name))).toEqual([]);
    expect(documented.has(ALLOW_UNSUPPORTED_NODE)).toBe(true);
  });
});

describe('where /rlconfig is served (RLCONFIG)', () => {
  it('is the HTTP port by default, and the debug port once DEBUG_HOST or DEBUG_PORT is set', () => {
    expect(readSettings({}).rlconfig).toEqual({ on: 'http' });
    expect(readSettings({ RLCONFIG: 'off' }).rlconfig).toEqual({ on: 'off' });
    expect(readSettings({ RLCONFIG: 'debug' }).rlconfig).toEqual({
      on: 'debug',
      host: '0.0.0.0',
      port: 6070,
    });
    expect(readSettings({ DEBUG_PORT: '7070' }).rlconfig).toEqual({
      on: 'debug',
      host: '0.0.0.0',
      port: 7070,
    });
    expect(readSettings({ DEBUG_HOST: '127.0.0.1', RLCONFIG: 'on' }).rlconfig).toEqual({
      on: 'http',
    });
  });

  it('refuses a value it does not know, naming the setting', () => {
    expect(failure({ RLCONFIG: 'admin' }).message).toMatch(/^RLCONFIG: 'admin'/);
    expect(failure({ DEBUG_PORT: '70000' }).message).toMatch(/^DEBUG_PORT/);
  });

  it('warns once when DEBUG_HOST or DEBUG_PORT is set but RLCONFIG keeps /rlconfig off it', () => {
    const warnings = (env: Record<string, string>) =>
      startupWarnings(readSettings(env), env, '24.0.0');
    expect(warnings({ DEBUG_PORT: '6070' })).toEqual([]);
    expect(warnings({ DEBUG_PORT: '6070', RLCONFIG: 'off' })).toEqual([
      'DEBUG_PORT is set but RLCONFIG=off: there is no debug listener (RLCONFIG=debug serves /rlconfig there)',
    ]);
  });
});

describe('the metrics listener (PROMETHEUS_ADDR)', () => {
  it('is off unless PROMETHEUS_ADDR is set or USE_PROMETHEUS=true, as Envoy Gateway sets them', () => {
    expect(readSettings({}).prometheus).toBeUndefined();
    expect(readSettings({ PROMETHEUS_PATH: '/stats' }).prometheus).toBeUndefined();
    expect(readSettings({ USE_PROMETHEUS: 'true', PROMETHEUS_ADDR: ':19001' }).prometheus).toEqual({
      host: undefined,
      port: 19001,
      path: '/metrics',
    });
    expect(readSettings({ USE_PROMETHEUS: 'true' }).prometheus).toEqual({
      host: undefined,
      port: 9090,
      path: '/metrics',
    });
    expect(readSettings({ PROMETHEUS_ADDR: '127.0.0.1:9102' }).prometheus).toMatchObject({
      host: '127.0.0.1',
      port: 9102,
    });
    expect(readSettings({ USE_PROMETHEUS: 'false', PROMETHEUS_ADDR: ':9090' }).prometheus).toBe(
      undefined,
    );
  });

  it('takes an IPv6 host in brackets and a path of its own', () => {
    expect(
      readSettings({ PROMETHEUS_ADDR: '[::1]:9090', PROMETHEUS_PATH: '/stats/prometheus' })
        .prometheus,
    ).toEqual({ host: '::1', port: 9090, path: '/stats/prometheus' });
  });

  it('refuses an address or a path it cannot serve, naming the setting', () => {
    for (const addr of ['9090', ':', 'host:', ':70000', 'a b:1', '::1:9090']) {
      expect(failure({ PROMETHEUS_ADDR: addr }).message).toMatch(
        new RegExp(`^PROMETHEUS_ADDR: '${addr.replace(/[.*+?^${}()|[\]\\]/g, '\\$&')}' is not`),
      );
    }
    expect(failure({ USE_PROMETHEUS: 'true', PROMETHEUS_PATH: 'metrics' }).message).toMatch(
      /^PROMETHEUS_PATH: 'metrics' is not a path/,
    );
    expect(failure({ USE_PROMETHEUS: 'maybe' }).message).toMatch(/^USE_PROMETHEUS: 'maybe'/);
  });
});

describe('RLQS queued bytes', () => {
  it('defaults to 64 MiB across streams and 30 s for an unread answer', () => {
    expect(readSettings({}).rlqs).toMatchObject({
      maxQueuedBytes: 16 * 1024 * 1024,
      maxQueuedBytesTotal: 64 * 1024 * 1024,
      unreadMs: 30_000,
    });
  });

  it('refuses a total under one stream’s bound, naming both', () => {
    expect(
      failure({ RLQS_MAX_QUEUED_BYTES: '2000', RLQS_MAX_QUEUED_BYTES_TOTAL: '1000' }).message,
    ).toBe(
      'RLQS_MAX_QUEUED_BYTES_TOTAL: 1000 is less than RLQS_MAX_QUEUED_BYTES (2000), which one stream may queue',
    );
    expect(failure({ RLQS_UNREAD_TIMEOUT: '10ms' }).message).toMatch(/^RLQS_UNREAD_TIMEOUT/);
  });
});
