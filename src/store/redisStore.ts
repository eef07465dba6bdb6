import { X509Certificate } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { createSecureContext, type ConnectionOptions } from 'node:tls';
import { Redis } from 'ioredis';
import { SettingsError, StoreError } from '../errors.js';
import type { RedisSettings, RedisTls } from '../settings.js';
import type { Store, StoreDecision } from './Store.js';
import { decideArgs, loadDecisionScript, readDecision, type ScriptArgs } from './script.js';

/**
 * The Redis store: one EVALSHA of the decision script per request (see lua/dispatch.lua).
 *
 * ioredis's defaults suit a cache, not a limiter in a request's critical path: it would queue
 * commands while disconnected and retry them, so a call could outlive Envoy's 20 ms deadline. Here
 * nothing is queued or retried, every call is bounded by REDIS_TIMEOUT, and FAILURE_MODE decides
 * what a failure answers. ioredis's script support sends EVALSHA and falls back to EVAL on
 * NOSCRIPT by itself, so a restart or SCRIPT FLUSH costs no failed request.
 */
export interface RedisStoreOptions {
  onError?: (error: StoreError) => void;
}

type DecideCommand = (...args: ScriptArgs) => Promise<unknown>;

export function createRedisStore(settings: RedisSettings, options: RedisStoreOptions = {}): Store {
  const redis = new Redis({
    host: settings.host,
    port: settings.port,
    username: settings.username,
    password: settings.password,
    db: settings.db,
    tls: settings.tls ? tlsOptions(settings.tls) : undefined,
    // The ready check sends INFO, which the least-privilege ACL user lacks (see README). Without
    // it, a Redis still loading its data answers LOADING, which fails fast like any outage.
    enableReadyCheck: false,
    enableOfflineQueue: false,
    // Calls made in the same tick go out in one socket write: per request, writing EVALSHA on
    // its own took a sixth of the service's CPU under load. Each call is still its own EVALSHA.
    enableAutoPipelining: true,
    maxRetriesPerRequest: 0,
    commandTimeout: settings.timeoutMs,
    connectTimeout: Math.max(1_000, settings.timeoutMs),
    // Keep reconnecting, never faster than every 50 ms nor slower than every second.
    retryStrategy: (attempt) => Math.min(50 * attempt, 1_000),
  });
  // ioredis reports connection trouble as events; the calls themselves fail fast meanwhile.
  redis.on('error', (error: Error) => options.onError?.(classify(error)));
  redis.defineCommand('tollgateDecide', { lua: loadDecisionScript() });
  const decide = (redis as unknown as { tollgateDecide: DecideCommand }).tollgateDecide.bind(redis);

  return {
    async decide(checks, nowMs): Promise<StoreDecision> {
      try {
        const { allowed, results } = readDecision(
          await decide(...decideArgs(checks, nowMs)),
          checks.length,
        );
        return { allowed, results };
      } catch (error) {
        throw classify(error);
      }
    },

    async reset(keys: readonly string[]) {
      if (keys.length === 0) return 0;
      try {
        return await redis.del(...keys);
      } catch (error) {
        throw classify(error);
      }
    },

    async ping() {
      try {
        if (redis.status === 'connecting' || redis.status === 'connect') await ready(redis, 1_000);
        await redis.ping();
      } catch (error) {
        throw classify(error);
      }
    },

    async close() {
      redis.disconnect();
    },
  };
}

/** Reads the TLS files once, at start-up, so a bad path or a mismatched pair stops it. */
function tlsOptions(tls: RedisTls): ConnectionOptions {
  const read = (setting: string, path: string | undefined) => {
    if (path === undefined) return undefined;
    try {
      return readFileSync(path);
    } catch (error) {
      throw new SettingsError(`${setting}: cannot read '${path}': ${(error as Error).message}`);
    }
  };
  const options: ConnectionOptions = {
    ca: read('REDIS_TLS_CACERT', tls.caPath),
    cert: read('REDIS_TLS_CLIENT_CERT', tls.clientCertPath),
    key: read('REDIS_TLS_CLIENT_KEY', tls.clientKeyPath),
  };
  // Checked apart, so that the error names the setting at fault.
  try {
    // createSecureContext would take a CA file that holds no certificate at all.
    if (options.ca !== undefined) new X509Certificate(options.ca as Buffer);
  } catch (error) {
    throw new SettingsError(`REDIS_TLS_CACERT: not a certificate (${(error as Error).message})`);
  }
  try {
    createSecureContext({ cert: options.cert, key: options.key });
  } catch (error) {
    throw new SettingsError(
      `REDIS_TLS_CLIENT_CERT, REDIS_TLS_CLIENT_KEY: not a certificate and its key (${(error as Error).message})`,
    );
  }
  // The reference's REDIS_TLS_SKIP_HOSTNAME_VERIFICATION: the chain is still verified.
  if (tls.skipHostnameVerification) options.checkServerIdentity = () => undefined;
  return options;
}

/** Waits for a connection under way, so a probe right after start-up sees it. */
function ready(redis: Redis, timeoutMs: number): Promise<void> {
  return new Promise((resolve) => {
    const done = () => {
      clearTimeout(timer);
      redis.off('ready', done);
      resolve();
    };
    const timer = setTimeout(done, timeoutMs);
    redis.once('ready', done);
  });
}

function classify(error: unknown): StoreError {
  if (error instanceof StoreError) return error;
  const message = error instanceof Error ? error.message : String(error);
  const kind = /timed out/i.test(message)
    ? 'timeout'
    : /^OOM/.test(message)
      ? 'out_of_memory'
      : /^(BUSY|LOADING|MASTERDOWN|READONLY|TRYAGAIN|CLUSTERDOWN)/.test(message)
        ? 'unavailable'
        : /^(NOAUTH|WRONGPASS|NOPERM)/.test(message)
          ? 'auth'
          : /^ERR/.test(message)
            ? 'script'
            : 'connection';
  return new StoreError(`redis: ${message}`, kind, { cause: error });
}
