import { describe, expect, it } from 'vitest';
import { StoreError } from '../../src/core/errors.js';
import { classifyRedisError } from '../../src/store/redisErrors.js';

/** An error reply as ioredis gives it. */
function reply(message: string): Error {
  const error = new Error(message);
  error.name = 'ReplyError';
  return error;
}

/** The first words of a message, by kind: what happened. */
const WHAT: Record<string, string> = {
  out_of_memory: 'out of memory',
  wrong_type: 'wrong type',
  permission: 'refused by ACL',
  auth: 'refused the credentials',
  unavailable: 'cannot serve now',
  script: 'error',
};

describe('classifyRedisError', () => {
  it.each([
    [
      "OOM command not allowed when used memory > 'maxmemory'. script: 1f2e, on @user_script:40.",
      'out_of_memory',
    ],
    ['WRONGTYPE Operation against a key holding the wrong kind of value', 'wrong_type'],
    ['WRONGTYPE a counter key holds a value that tollgate did not write', 'wrong_type'],
    ["NOPERM User tollgate has no permissions to run the 'time' command", 'permission'],
    [
      "ERR Error running script (call to f_1f2e): @user_script:99: NOPERM this user has no permissions to run the 'hset' command",
      'permission',
    ],
    ['NOAUTH Authentication required.', 'auth'],
    ['WRONGPASS invalid username-password pair or user is disabled.', 'auth'],
    ['LOADING Redis is loading the dataset in memory', 'unavailable'],
    ['BUSY Redis is busy running a script.', 'unavailable'],
    ["READONLY You can't write against a read only replica.", 'unavailable'],
    ['CLUSTERDOWN The cluster is down', 'unavailable'],
    ['ERR unknown command', 'script'],
    ['something new from Redis', 'script'],
  ])('names the reply %j %s', (message, kind) => {
    const error = classifyRedisError(reply(message));
    expect(error).toBeInstanceOf(StoreError);
    expect(error.kind).toBe(kind);
    expect(error.message).toBe(`redis: ${WHAT[kind]}: ${message}`);
  });

  it.each([
    ["Stream isn't writeable and enableOfflineQueue options is false", 'connection'],
    ['connect ECONNREFUSED 127.0.0.1:6379', 'connection'],
    ['Connection is closed.', 'connection'],
    ['connect ETIMEDOUT', 'timeout'],
  ])('names the client error %j %s', (message, kind) => {
    expect(classifyRedisError(new Error(message)).kind).toBe(kind);
  });

  it('says what happened to a call in flight when its connection closed', () => {
    const error = classifyRedisError(
      new Error(
        'Reached the max retries per request limit (which is 0). Refer to "maxRetriesPerRequest" option for details.',
      ),
    );
    expect([error.kind, error.message]).toEqual([
      'connection',
      'redis: not connected: the connection closed while the call was in flight (it may have been applied)',
    ]);
    expect(
      classifyRedisError(
        new Error("Stream isn't writeable and enableOfflineQueue options is false"),
      ).message,
    ).toBe(
      'redis: not connected: the connection is not open yet, or was lost; calls are not queued meanwhile',
    );
  });

  it('keeps a StoreError as it is', () => {
    const timeout = new StoreError('redis: timed out: no answer within 15 ms', 'timeout');
    expect(classifyRedisError(timeout)).toBe(timeout);
  });
});
