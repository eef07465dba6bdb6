// The settings an operator sets through the environment: every default from BRIEF's table, each
// bad value stopping start-up with a message that names the setting, the accepted REDIS_URL forms
// and the reference's RUNTIME_ROOT layout.
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { SettingsError } from '../../src/errors.js';
import { BUNDLED_RULES, readSettings } from '../../src/settings.js';

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
      maxDescriptors: 64,
      maxEntries: 16,
      maxEntryBytes: 1024,
      workers: 1,
      logLevel: 'info',
      logFormat: 'json',
      mergeDomainConfig: false,
      configPollIntervalMs: 10_000,
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
        maxConcurrentStreams: 0,
        keepaliveTimeMs: 7_200_000,
        keepaliveTimeoutMs: 20_000,
        tls: undefined,
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
