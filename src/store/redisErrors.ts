import { StoreError } from '../core/errors.js';

/**
 * Redis failures as StoreErrors, each with a kind named for what happened. The kind labels
 * `tollgate_store_errors_total` and the logs, so the set is fixed:
 *
 * | kind | what happened |
 * |---|---|
 * | `timeout` | Redis did not answer within REDIS_TIMEOUT |
 * | `connection` | no connection to Redis: refused, closed, reconnecting |
 * | `out_of_memory` | Redis refused a write past `maxmemory` |
 * | `wrong_type` | a counter key holds something tollgate did not write |
 * | `permission` | the Redis user may not run a command tollgate needs (ACL) |
 * | `auth` | Redis refused the credentials |
 * | `unavailable` | Redis answered, but cannot serve now: loading, busy, read-only, cluster down |
 * | `script` | any other error reply, e.g. an unexpected reply from the script |
 */
export type StoreErrorKind =
  | 'timeout'
  | 'connection'
  | 'out_of_memory'
  | 'wrong_type'
  | 'permission'
  | 'auth'
  | 'unavailable'
  | 'script';

/** Error replies by their leading code; inside a script Redis keeps the code of the command. */
const REPLY_KINDS: readonly [RegExp, StoreErrorKind][] = [
  [/^OOM\b/, 'out_of_memory'],
  [/^WRONGTYPE\b/, 'wrong_type'],
  [/^NOPERM\b|\bNOPERM\b/, 'permission'],
  [/^(NOAUTH|WRONGPASS)\b/, 'auth'],
  [/^(BUSY|LOADING|MASTERDOWN|READONLY|TRYAGAIN|CLUSTERDOWN|NOREPLICAS|MISCONF)\b/, 'unavailable'],
];

/** What happened, as the first words of every store error's message. */
const WHAT: Readonly<Record<StoreErrorKind, string>> = {
  timeout: 'timed out',
  connection: 'not connected',
  out_of_memory: 'out of memory',
  wrong_type: 'wrong type',
  permission: 'refused by ACL',
  auth: 'refused the credentials',
  unavailable: 'cannot serve now',
  script: 'error',
};

/** Every kind, so that metrics can start each at 0. */
export const STORE_ERROR_KINDS = Object.keys(WHAT) as readonly StoreErrorKind[];

/** ioredis's texts for a connection that is not there, in words an operator can act on. */
const CLIENT_TEXTS: readonly [RegExp, string][] = [
  [
    /^Stream isn't writeable and enableOfflineQueue options is false/,
    'the connection is not open yet, or was lost; calls are not queued meanwhile',
  ],
  [/^Connection is closed\.?$/, 'the connection is closed'],
  [
    /^Reached the max retries per request limit/,
    'the connection closed while the call was in flight (it may have been applied)',
  ],
];

export function classifyRedisError(error: unknown): StoreError {
  if (error instanceof StoreError) return error;
  let detail = error instanceof Error ? error.message : String(error);
  const kind = kindOf(error, detail);
  for (const [pattern, text] of CLIENT_TEXTS) if (pattern.test(detail)) detail = text;
  return new StoreError(`redis: ${WHAT[kind]}: ${detail}`, kind, { cause: error });
}

function kindOf(error: unknown, message: string): StoreErrorKind {
  for (const [pattern, kind] of REPLY_KINDS) if (pattern.test(message)) return kind;
  // An error reply from Redis (ioredis's ReplyError), or one of ours about a reply.
  if (isReply(error) || /^ERR\b/.test(message)) return 'script';
  if (/timed? ?out/i.test(message)) return 'timeout';
  return 'connection';
}

function isReply(error: unknown): boolean {
  return error instanceof Error && error.name === 'ReplyError';
}
