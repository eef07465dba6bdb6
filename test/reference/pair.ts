import { mkdtempSync, renameSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { expect } from 'vitest';
import type { RateLimitRequestObject, RateLimitResponseObject } from '@tollgate/client';
import { spawnTollgate, type TollgateProcess } from '../support/processes.js';
import { startRedis } from '../support/redis.js';
import type { Redis } from 'ioredis';
import { callCheck, isProbeKey, resetMs } from '../support/tollgate.js';
import { startReference, type ReferenceProcess } from './reference.js';

/**
 * The reference and tollgate (COMPAT_MODE=reference) side by side, each on a Redis of its own,
 * with the same rules files and settings. `check` sends one request to both and asserts that
 * they answer alike, field by field.
 */
export interface Pair {
  reference: ReferenceProcess;
  tollgate: TollgateProcess;
  /** Sends the request to both; expects the same answer; resolves with the reference's. */
  check(request: RateLimitRequestObject): Promise<RateLimitResponseObject>;
  /** Sends the request to both, at once, without comparing: see `expectAlike`. */
  send(request: RateLimitRequestObject): Promise<Exchange>;
  /** Writes a rules file for both, then waits until both answer `probe` alike. */
  writeRules(name: string, yaml: string): void;
  /** Empties both Redis servers, so that a scenario starts from no counts. */
  flush(): Promise<void>;
  /** How many responses were compared so far, across every pair. */
  readonly compared: number;
  /** Both services' per-rule statistics, as their Prometheus endpoints give them. */
  stats(): Promise<{ reference: RuleStats; tollgate: RuleStats }>;
  /** Both services' `ratelimit_localcache_*` gauges, by name, as their /metrics give them. */
  localCache(): Promise<{ reference: RuleStats; tollgate: RuleStats }>;
  /**
   * Every counter's count in each Redis, sorted: the reference's plain keys, tollgate's `c`
   * fields (its health probe's counter left out). The key formats differ; the counts must not.
   * A count of 0 is left out: the reference's `INCRBY key 0` leaves such a key, which decides
   * everything after it as no key would.
   */
  counts(): Promise<{ reference: number[]; tollgate: number[] }>;
  /**
   * Every key of each Redis with its value, health probes left out: with COMPAT_KEYS=reference
   * both services write the reference's own keys, so the two must be the same, key for key.
   */
  keys(): Promise<{ reference: Record<string, string>; tollgate: Record<string, string> }>;
  stop(): Promise<void>;
}

/** `name{domain,key1,key2}` → value, for the per-rule series. */
export type RuleStats = Record<string, number>;

let compared = 0;
export const comparedResponses = (): number => compared;

export async function startPair(
  rules: Readonly<Record<string, string>>,
  env: Record<string, string> = {},
  referenceBinary?: string,
): Promise<Pair> {
  const [referenceRedis, tollgateRedis] = await Promise.all([startRedis(), startRedis()]);
  const rulesDir = mkdtempSync(join(tmpdir(), 'tollgate-pair-'));
  const writeOwn = (name: string, yaml: string) => {
    const staged = join(rulesDir, '.staged');
    writeFileSync(staged, yaml);
    renameSync(staged, join(rulesDir, name));
  };
  for (const [name, yaml] of Object.entries(rules)) writeOwn(name, yaml);
  const [reference, tollgate] = await Promise.all([
    startReference(rules, `127.0.0.1:${referenceRedis.port}`, env, referenceBinary),
    spawnTollgate('', {
      CONFIG_PATH: rulesDir,
      CONFIG_SETTLE_TIME: '0s',
      CONFIG_POLL_INTERVAL: '200ms',
      REDIS_URL: `127.0.0.1:${tollgateRedis.port}`,
      REDIS_TIMEOUT: '2s',
      COMPAT_MODE: 'reference',
      // Functions, or a refusal to start where they cannot be called; a pair may turn them off.
      REDIS_FUNCTIONS: 'on',
      ...env,
    }),
  ]);
  const send = async (request: RateLimitRequestObject): Promise<Exchange> => {
    const started = Date.now();
    const expected = await callCheck(reference.client, request);
    const actual = await callCheck(tollgate.client, request);
    return { request, expected, actual, started, gapMs: Date.now() - started };
  };
  return {
    reference,
    tollgate,
    async check(request) {
      await clearOfWindowEdges();
      const exchange = await send(request);
      expectAlike(exchange);
      return exchange.expected;
    },
    send,
    writeRules(name, yaml) {
      reference.writeRules(name, yaml);
      writeOwn(name, yaml);
    },
    async flush() {
      await Promise.all([referenceRedis.client.flushall(), tollgateRedis.client.flushall()]);
    },
    get compared() {
      return compared;
    },
    async stats() {
      await new Promise((resolve) => setTimeout(resolve, 400));
      const [ref, own] = await Promise.all([
        fetch(reference.metricsUrl).then((r) => r.text()),
        fetch(`${tollgate.httpUrl}/metrics`).then((r) => r.text()),
      ]);
      return { reference: ruleStats(ref), tollgate: asReferenceMapsThem(ruleStats(own)) };
    },
    async localCache() {
      await new Promise((resolve) => setTimeout(resolve, 400)); // the reference's flush
      const gauges = (text: string) =>
        Object.fromEntries(
          [...text.matchAll(/^ratelimit_localcache_(\w+) ([0-9.e+]+)$/gm)].map(([, n, v]) => [
            n as string,
            Number(v),
          ]),
        );
      const [ref, own] = await Promise.all([
        fetch(reference.metricsUrl).then((r) => r.text()),
        fetch(`${tollgate.httpUrl}/metrics`).then((r) => r.text()),
      ]);
      return { reference: gauges(ref), tollgate: gauges(own) };
    },
    async keys() {
      const read = async (client: Redis) => {
        const keys = (await client.keys('*')).filter((key) => !isProbeKey(key)).sort();
        const plain = keys.filter((key) => key !== 'tollgate-probe');
        const values = await Promise.all(plain.map((key) => client.get(key)));
        return Object.fromEntries(plain.map((key, i) => [key, values[i] ?? '']));
      };
      const [theirs, ours] = await Promise.all([
        read(referenceRedis.client),
        read(tollgateRedis.client),
      ]);
      return { reference: theirs, tollgate: ours };
    },
    async counts() {
      const read = async (client: Redis, field: boolean) => {
        const keys = (await client.keys('*')).filter((key) => !isProbeKey(key));
        const values = await Promise.all(
          keys.map((key) => (field ? client.hget(key, 'c') : client.get(key))),
        );
        return values
          .map(Number)
          .filter((count) => count !== 0)
          .sort((a, b) => a - b);
      };
      const [theirs, ours] = await Promise.all([
        read(referenceRedis.client, false),
        // COMPAT_KEYS=reference: tollgate's counts are plain, as the reference's are.
        read(tollgateRedis.client, env.COMPAT_KEYS !== 'reference'),
      ]);
      return { reference: theirs, tollgate: ours };
    },
    async stop() {
      await Promise.all([reference.stop(), tollgate.stop()]);
      await Promise.all([referenceRedis.stop(), tollgateRedis.stop()]);
    },
  };
}

/**
 * Waits until a request pair cannot compare two different windows. Both services' windows start
 * at the same epoch-aligned instants, so it waits out:
 * - the last 500 ms before a minute turns, so that a pair does not straddle the turn;
 * - the first second of a minute and the first minute of an hour: there the reference's key for
 *   one descriptor is the same for two units (it names the window's start, not its unit), so a
 *   per-second or per-minute count and an hour override of that descriptor share one counter,
 *   where tollgate keeps them apart (see docs/migration.md).
 * Per-second windows are otherwise left to scenarios that align themselves.
 */
async function clearOfWindowEdges(): Promise<void> {
  for (;;) {
    const now = Date.now();
    const intoMinute = now % 60_000;
    const intoHour = now % 3_600_000;
    let waitMs = 0;
    if (intoHour < 61_000) waitMs = 61_000 - intoHour;
    else if (intoMinute > 59_500) waitMs = 60_000 - intoMinute + 1_050;
    else if (intoMinute < 1_050) waitMs = 1_050 - intoMinute;
    if (waitMs === 0) return;
    await new Promise((resolve) => setTimeout(resolve, waitMs));
  }
}

type Status = NonNullable<RateLimitResponseObject['statuses']>[number];

/** The pinned reference build's two quota fields, which main's shape no longer has. */
const PINNED_ONLY_METADATA = ['quotaModeViolations', 'quotaModeEnabled'];

function comparable(response: RateLimitResponseObject) {
  const fields = Object.fromEntries(
    Object.entries(response.dynamic_metadata?.fields ?? {}).filter(
      ([name]) => !PINNED_ONLY_METADATA.includes(name),
    ),
  );
  return {
    overall: response.overall_code,
    statuses: (response.statuses ?? []).map((status: Status) => ({
      code: status.code,
      // A zero is absent from the reference's encoding and present in tollgate's: proto3 reads
      // both as 0.
      limit: status.current_limit
        ? `${status.current_limit.requests_per_unit ?? 0}/${status.current_limit.unit}`
        : undefined,
      remaining: status.limit_remaining ?? 0,
      hasReset: resetMs(status) !== undefined,
    })),
    headers: (response.response_headers_to_add ?? [])
      .map((h) => `${h.key}: ${h.key?.toLowerCase().endsWith('reset') ? '(seconds)' : h.value}`)
      .sort(),
    metadata: response.dynamic_metadata ? collapseOverrideSpaces(fields) : undefined,
  };
}

/** One request sent to both services. */
export interface Exchange {
  request: RateLimitRequestObject;
  /** The reference's answer. */
  expected: RateLimitResponseObject;
  /** tollgate's answer. */
  actual: RateLimitResponseObject;
  /** When the reference was called (ms since the epoch). */
  started: number;
  /** The time between the two calls: tollgate decided up to this much later. */
  gapMs: number;
}

/** Expects both answers of an exchange alike, field by field; counts it as compared. */
export function expectAlike({ request, expected, actual, started, gapMs }: Exchange): void {
  compared += 1;
  const what = `request #${compared}: ${JSON.stringify(request)}`;
  expect(comparable(actual), what).toEqual(comparable(expected));
  // Both answer whole seconds: the unit less the whole seconds elapsed in it. Both read the
  // time somewhere between `started` and `started + gapMs`, give or take the clocks' rounding
  // (5 ms); but a denial from tollgate's over-limit cache counts down a deadline taken before
  // the store call that learnt it, so early by that call's latency (tens of ms on a busy machine),
  // and reads as if taken that much later (50 ms allowed). Within one second the two must agree
  // exactly, across a second's turn by one second.
  const oneSecond = Math.floor((started - 5) / 1000) === Math.floor((started + gapMs + 50) / 1000);
  (expected.statuses ?? []).forEach((status, i) => {
    const theirs = resetMs(status);
    const ours = resetMs(actual.statuses?.[i] ?? {});
    if (theirs !== undefined && ours !== undefined) {
      const where = `${what}: duration_until_reset of status ${i}`;
      expect(ours % 1000, `${where} in whole seconds`).toBe(0);
      if (oneSecond) expect(ours, where).toBe(theirs);
      else expect(Math.abs(theirs - ours), where).toBeLessThanOrEqual(1_000);
    }
  });
  const headerValue = (r: RateLimitResponseObject, suffix: string) =>
    r.response_headers_to_add?.find((h) => h.key?.toLowerCase().endsWith(suffix))?.value;
  const theirReset = headerValue(expected, 'reset');
  if (theirReset !== undefined) {
    expect(
      Math.abs(Number(headerValue(actual, 'reset')) - Number(theirReset)),
      `${what}: reset header`,
    ).toBeLessThanOrEqual(1);
  }
}

const RULE_SERIES = /^(ratelimit_service_rate_limit_[a-z_]+)\{([^}]*)\} ([0-9.e+]+)$/;

/** The per-rule counters of a Prometheus text exposition, by name and labels. */
function ruleStats(text: string): RuleStats {
  const stats: RuleStats = {};
  for (const line of text.split('\n')) {
    const match = RULE_SERIES.exec(line);
    if (match === null) continue;
    const [, name, labels, value] = match;
    // An empty label is an absent one: the reference leaves key2 out for one-level rules.
    const sorted = (labels as string)
      .split(',')
      .filter((label) => !label.endsWith('=""'))
      .sort()
      .join(',');
    const number = Number(value);
    if (number !== 0) stats[`${name}{${sorted}}`] = number;
  }
  return stats;
}

/**
 * The reference's default Prometheus mapping matches `over_limit` by a regular expression that is
 * not anchored at its end, so for a rule two or more levels deep the `over_limit_with_local_cache`
 * statistic lands in `over_limit` too, and its own series is not exposed at all. tollgate exposes
 * both as they are: folded here the same way for the comparison.
 */
function asReferenceMapsThem(stats: RuleStats): RuleStats {
  const folded: RuleStats = {};
  for (const [series, value] of Object.entries(stats)) {
    const cached = /^ratelimit_service_rate_limit_over_limit_with_local_cache(\{.*\})$/.exec(
      series,
    );
    if (cached === null) {
      folded[series] = (folded[series] ?? 0) + value;
    } else if (cached[1]?.includes('key2=')) {
      const overLimit = `ratelimit_service_rate_limit_over_limit${cached[1]}`;
      folded[overLimit] = (folded[overLimit] ?? 0) + value;
    }
  }
  return folded;
}

/**
 * A limit override in the metadata is protobuf's text form, which Go's encoder prints with one or
 * two spaces between fields at random (so that no one relies on it): compared with one.
 */
function collapseOverrideSpaces(value: unknown): unknown {
  return JSON.parse(JSON.stringify(value), (_key, inner: unknown) =>
    typeof inner === 'string' && inner.startsWith('requests_per_unit:')
      ? inner.replace(/ +/g, ' ')
      : inner,
  );
}
