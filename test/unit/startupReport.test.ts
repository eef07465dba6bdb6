// The warnings of start-up: each one line naming the setting, read from the parsed settings; none
// for what is harmless, for service links, or for what Envoy Gateway sets.
import { describe, expect, it } from 'vitest';
import { SettingsError } from '../../src/core/errors.js';
import { checkNodeLine, parseEngines, supportedNodeLines } from '../../src/core/nodeLines.js';
import { editDistance, likelySetting } from '../../src/process/settingNames.js';
import { readSettings } from '../../src/process/settings.js';
import { listeningReport, startupWarnings } from '../../src/process/startupReport.js';
import { ENVOY_GATEWAY_ENV } from '../support/envoyGateway.js';

const SUPPORTED = '24.22.3';

function warnings(env: Record<string, string>, node = SUPPORTED): string[] {
  return startupWarnings(readSettings(env), env, node);
}

/** What the kubelet sets for Services named statsd, redis and kubernetes in the namespace. */
const SERVICE_LINKS = {
  STATSD_PORT: 'tcp://10.0.0.1:8125',
  STATSD_PORT_8125_TCP: 'tcp://10.0.0.1:8125',
  STATSD_PORT_8125_TCP_PROTO: 'tcp',
  STATSD_PORT_8125_TCP_PORT: '8125',
  STATSD_PORT_8125_TCP_ADDR: '10.0.0.1',
  STATSD_SERVICE_HOST: '10.0.0.1',
  STATSD_SERVICE_PORT: '8125',
  STATSD_SERVICE_PORT_METRICS: '8125',
  REDIS_PORT: 'tcp://10.0.0.2:6379',
  REDIS_SERVICE_HOST: '10.0.0.2',
  REDIS_SERVICE_PORT: '6379',
  REDIS_PORT_6379_TCP_ADDR: '10.0.0.2',
  KUBERNETES_PORT: 'tcp://10.0.0.3:443',
  KUBERNETES_SERVICE_HOST: '10.0.0.3',
};

describe('start-up warnings', () => {
  it("give none for Envoy Gateway's environment, every branch of it", () => {
    expect(warnings(ENVOY_GATEWAY_ENV)).toEqual([]);
  });

  it('give none for service links, whose settings are not read while their feature is off', () => {
    expect(warnings({ ...SERVICE_LINKS, REDIS_URL: 'h:1' })).toEqual([]);
  });

  it('read booleans from the parsed settings: USE_STATSD=on is statsd on', () => {
    const env = { USE_STATSD: 'on', STATSD_HOST: 'stats', STATSD_PORT: '9125' };
    expect(readSettings(env).statsd).toMatchObject({ host: 'stats', port: 9125 });
    expect(warnings(env)).toEqual([]);
    expect(warnings({ USE_STATSD: 'off', STATSD_HOST: 'stats' })).toEqual([
      'STATSD_HOST is set but statsd is off: tollgate sends statsd only with USE_STATSD=true (the reference sends it by default)',
    ]);
  });

  it('read STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT=yes as true, outside compatibility mode', () => {
    const warning =
      'STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT=true is read only under COMPAT_MODE=reference: ' +
      'without it, a denied request never increments any counter';
    expect(warnings({ STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT: 'yes' })).toEqual([warning]);
    expect(
      warnings({ STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT: 'yes', COMPAT_MODE: 'reference' }),
    ).toEqual([]);
  });

  it('name a variable that looks like a setting, and the setting it likely means', () => {
    expect(
      warnings({
        REDIS_URI: 'redis://cache:6379',
        redis_url: 'redis://cache:6379',
        LOG_LEVLE: 'debug',
        RLQS_MAX_STREAM: '10',
        CONFIG_FILE: 'rules.yaml',
        STATSD_ADDRESS: 'stats:8125',
        // Not settings, and not like one: said nothing of.
        HOME: '/home/node',
        HOSTNAME: 'tollgate-0',
        NODE_ENV: 'production',
        HTTP_PROXY: 'http://proxy:3128',
        GRPC_TRACE: 'all',
        GRPC_NODE_VERBOSITY: 'DEBUG',
        OTEL_RESOURCE_ATTRIBUTES: 'a=b',
      }),
    ).toEqual([
      'CONFIG_FILE is not a setting, and nothing reads it, though it starts as the CONFIG_* settings do (docs/settings.md lists them)',
      'LOG_LEVLE is not a setting, and nothing reads it: did you mean LOG_LEVEL?',
      'REDIS_URI is not a setting, and nothing reads it: did you mean REDIS_URL?',
      'RLQS_MAX_STREAM is not a setting, and nothing reads it: did you mean RLQS_MAX_STREAMS?',
      'STATSD_ADDRESS is not a setting, and nothing reads it, though it starts as the STATSD_* settings do (docs/settings.md lists them)',
      'redis_url is not a setting, and nothing reads it: did you mean REDIS_URL?',
    ]);
  });

  it('warn of reference settings not honoured, unless their value is what tollgate does anyway', () => {
    expect(
      warnings({
        RUNTIME_IGNOREDOTFILES: 'false',
        PROMETHEUS_MAPPER_YAML: '/etc/ratelimit/mapper.yaml',
        TRACING_ENABLED: 'true',
        TRACING_SAMPLING_RATE: '0.1',
        REDIS_PERSECOND: 'true',
        REDIS_PERSECOND_URL: 'redis://:secret@persecond:6379',
        MEMCACHE_HOST_PORT: 'memcached:11211',
      }),
    ).toEqual([
      'MEMCACHE_HOST_PORT is set but not used by tollgate: read only with BACKEND_TYPE=memcache, and tollgate has no memcached store',
      "PROMETHEUS_MAPPER_YAML=/etc/ratelimit/mapper.yaml is set but not used by tollgate: tollgate's series have names of their own (docs/operations.md)",
      'REDIS_PERSECOND=true is set but not used by tollgate: per-second limits share the one Redis of REDIS_URL',
      'REDIS_PERSECOND_URL is set but not used by tollgate: per-second limits share the one Redis of REDIS_URL',
      'RUNTIME_IGNOREDOTFILES=false is set but not used by tollgate: dotfiles in the rules directory are always skipped',
      'TRACING_ENABLED=true is set but not used by tollgate: tracing is on when OTEL_EXPORTER_OTLP_ENDPOINT (or OTEL_EXPORTER_OTLP_TRACES_ENDPOINT) is set, and OTEL_SDK_DISABLED=true turns it off',
      'TRACING_SAMPLING_RATE=0.1 is set but not used by tollgate: every trace is sampled unless its caller says not; OTEL_TRACES_SAMPLER=parentbased_traceidratio with OTEL_TRACES_SAMPLER_ARG samples a share',
    ]);
    expect(
      warnings({
        REDIS_PERSECOND: 'False',
        DISABLE_STATS: 'no',
        EXPIRATION_JITTER_MAX_SECONDS: '0',
        TRACING_ENABLED: 'false',
        TRACING_EXPORTER_PROTOCOL: 'http',
        COMPAT_MODE: 'reference',
        LOCAL_CACHE_SIZE_IN_BYTES: '1000',
      }),
    ).toEqual([]);
  });
});

describe('the Node line', () => {
  it("comes from package.json's engines", () => {
    expect(supportedNodeLines()).toEqual([22, 24, 26]);
    expect(parseEngines('^22 || ^24')).toEqual([22, 24]);
    expect(() => parseEngines('>=22')).toThrow(/engines.node: '>=22'/);
  });

  it('refuses a line outside them, naming the lines and the way to run anyway', () => {
    expect(() => checkNodeLine('20.20.2', {})).toThrow(
      new SettingsError(
        'Node 20.20.2 is not a supported line: tollgate runs on Node 22, 24 or 26 ' +
          '(TOLLGATE_ALLOW_UNSUPPORTED_NODE=1 runs it anyway)',
      ),
    );
    for (const version of ['22.0.0', '24.22.3', '26.1.0']) {
      expect(checkNodeLine(version, {})).toBeUndefined();
    }
  });

  it('runs anyway with TOLLGATE_ALLOW_UNSUPPORTED_NODE, with one warning', () => {
    const env = { TOLLGATE_ALLOW_UNSUPPORTED_NODE: 'yes' };
    expect(warnings(env, '20.20.2')).toEqual([
      'Node 20.20.2 is not a supported line (22, 24 or 26): running anyway, since TOLLGATE_ALLOW_UNSUPPORTED_NODE is set',
    ]);
    expect(warnings(env)).toEqual([]);
    expect(() => checkNodeLine('24.22.3', { TOLLGATE_ALLOW_UNSUPPORTED_NODE: 'please' })).toThrow(
      "TOLLGATE_ALLOW_UNSUPPORTED_NODE: 'please' is not true or false",
    );
  });
});

describe('likely settings', () => {
  it('are within a small edit distance, transpositions counting one', () => {
    expect(editDistance('LOG_LEVLE', 'LOG_LEVEL')).toBe(1);
    expect(editDistance('REDIS_URI', 'REDIS_URL')).toBe(1);
    expect(editDistance('', 'ab')).toBe(2);
    expect(likelySetting('REDIS_TIMEOUT_MS')).toBe('REDIS_TIMEOUT');
    expect(likelySetting('GRPC_PROT')).toBe('GRPC_PORT');
    expect(likelySetting('HOME')).toBeUndefined();
    expect(likelySetting('REDIS_PASSWORD')).toBeUndefined();
  });
});

describe('the start-up report', () => {
  const report = (env: Record<string, string>) =>
    listeningReport(
      readSettings(env),
      { grpcPort: 8081, httpPort: 8080 },
      { source: 'rules.yaml', loaded: undefined },
    );

  it("names the effective REDIS_TIMEOUT under COMPAT_MODE=reference, against the reference's 10s", () => {
    expect(report({ COMPAT_MODE: 'reference', REDIS_URL: 'cache:6379' })).toMatchObject({
      redisTimeoutMs: 15,
      redisTimeout:
        "15ms: a Redis call that takes longer answers per FAILURE_MODE (the reference's default " +
        "is 10s, past Envoy's 20 ms timeout; see docs/migration.md)",
    });
    expect(report({ REDIS_URL: 'cache:6379' })).not.toHaveProperty('redisTimeout');
  });

  it("says when the counters are the reference's own (COMPAT_KEYS=reference)", () => {
    const shared = { COMPAT_MODE: 'reference', COMPAT_KEYS: 'reference', REDIS_URL: 'cache:6379' };
    expect(report(shared).compatKeys).toMatch(/^reference: the reference's own counters/);
    expect(report({ COMPAT_MODE: 'reference', REDIS_URL: 'cache:6379' })).not.toHaveProperty(
      'compatKeys',
    );
  });
});
