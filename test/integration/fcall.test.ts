import { Command, Redis } from 'ioredis';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { fcallSender } from '../../src/store/fcall.js';
import type { ScriptArgs } from '../../src/store/scriptCall.js';
import { startRedis, type TestRedis } from '../support/redis.js';

// tollgate writes its FCALLs itself (src/store/fcall.ts) rather than through ioredis's `call`.
// Whatever the arguments, Redis must receive exactly what `call` would have sent: the same keys
// and arguments, byte for byte, and the reply must come back decoded as `call` decodes it.

let redis: TestRedis;
let client: Redis;

// Echoes what the function received: its keys, then its arguments, as Redis read them.
const ECHO_LIBRARY = [
  '#!lua name=tollgate_fcall_echo',
  "redis.register_function('tollgate_fcall_echo', function(keys, args) return {keys, args} end)",
].join('\n');

beforeAll(async () => {
  redis = await startRedis();
  client = new Redis({ host: redis.host, port: redis.port, lazyConnect: true });
  await client.connect();
  await client.call('FUNCTION', 'LOAD', 'REPLACE', ECHO_LIBRARY);
});

afterAll(async () => {
  client?.disconnect();
  await redis?.stop();
});

const ODD_KEYS = [
  '',
  'plain',
  'ключ_лимита',
  '日本語のキー',
  'emoji_🚦_key',
  'crlf\r\n$5\r\nFCALL\r\n',
  'nul\u0000byte',
  '\u00ff\u00fe\u0080 latin-1 bytes',
  '*3\r\n',
];

const ODD_ARGS: ScriptArgs = [
  '',
  0,
  -1,
  1.5,
  0.1,
  Number.MAX_SAFE_INTEGER,
  2 ** 63,
  1e21,
  -1e-7,
  1_764_000_000_123,
  'ümlaut',
  '\r\n',
];

const cases: { name: string; args: ScriptArgs }[] = [
  { name: 'no key, no argument', args: [0] },
  { name: 'odd keys', args: [ODD_KEYS.length, ...ODD_KEYS] },
  { name: 'odd arguments', args: [0, ...ODD_ARGS] },
  { name: 'both', args: [ODD_KEYS.length, ...ODD_KEYS, ...ODD_ARGS] },
  { name: 'a long key', args: [1, 'k'.repeat(70_000), 'é'.repeat(40_000)] },
];

describe('an FCALL written by tollgate', () => {
  it.each(cases)('is the bytes ioredis would write: $name', ({ args }) => {
    // What ioredis's `call` builds (it converts numbers to text before it writes).
    const ioredis = new Command('FCALL', ['tollgate_fcall_echo', ...args], {
      replyEncoding: 'utf8',
    });
    let written: unknown;
    const recorder = {
      sendCommand(command: Command) {
        written = command.toWritable({});
        return Promise.resolve();
      },
    } as unknown as Redis;
    void fcallSender(recorder, 'tollgate_fcall_echo')(args);
    expect(written).toBe(ioredis.toWritable({}));
  });

  it.each(cases)('reaches Redis as it was given, as `call` does: $name', async ({ args }) => {
    const numKeys = args[0] as number;
    const sent = args.slice(1).map(String);
    const expected = [sent.slice(0, numKeys), sent.slice(numKeys)];
    const fast = await fcallSender(client, 'tollgate_fcall_echo')(args);
    expect(fast).toEqual(expected);
    expect(await client.call('FCALL', 'tollgate_fcall_echo', ...args)).toEqual(fast);
  });

  it('fails as `call` fails, with Redis error and all', async () => {
    const missing = fcallSender(client, 'tollgate_no_such_function')([0]);
    await expect(missing).rejects.toThrow(/^ERR Function not found/);
    const badKeys = fcallSender(client, 'tollgate_fcall_echo')([5, 'only one key']);
    await expect(badKeys).rejects.toThrow(/Number of keys can't be greater/);
  });

  it('keeps replies in order among other commands on the connection', async () => {
    const send = fcallSender(client, 'tollgate_fcall_echo');
    const replies = await Promise.all(
      Array.from({ length: 200 }, (_, i) =>
        i % 3 === 0 ? client.echo(`echo ${i}`) : send([1, `key ${i}`, i]),
      ),
    );
    replies.forEach((reply, i) => {
      expect(reply).toEqual(i % 3 === 0 ? `echo ${i}` : [[`key ${i}`], [String(i)]]);
    });
  });
});
