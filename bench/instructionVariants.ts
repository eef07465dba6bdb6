import {
  batchCall,
  decideArgs,
  decideCall,
  loadDecisionScript,
  type ScriptArgs,
} from '../src/store/script.js';
import { loadFixedWindowScript } from '../src/store/fixedWindowScript.js';
import { decisionCode } from '../src/store/library.js';
import { check, HASH_COMMANDS, STRING_COMMANDS } from './scriptCost.js';

/**
 * The calls whose instructions `--script-cost --instructions` counts (bench/scriptInstructions.ts):
 * tollgate's two scripts by EVALSHA, scripts that decide nothing, by EVALSHA and by FCALL, the
 * plain fixed-window script wrapped as a Redis Function (hash counters, and the same logic on a
 * counter packed in one string), and the bare commands with one part of that script's work
 * added at a time. Every function here is the bench's own: none is what the service loads.
 */
export type Via = 'EVALSHA' | 'FCALL';

export interface CountedVariant {
  /** Names the row; the same id by both calls, and for one and three counters. */
  id: string;
  title: string;
  via: Via;
  counters: number;
  /** The script for SCRIPT LOAD, or the library for FUNCTION LOAD. */
  code: string;
  /** The function that FCALL calls. */
  fn?: string;
  /** The call's arguments, numkeys first, for tenant `i`. */
  args(i: number): ScriptArgs;
}

export const TENANTS = 50;

/** The checks of one tenant in the batch variant: every check on the same counters. */
const BATCH = 8;

function keys(i: number, n: number): string[] {
  return Array.from({ length: n }, (_, k) => `tg:{${i}}:cost:${k}`);
}

const TIME = { nowMs: undefined, skewToleranceMs: 0 };
const plainArgs = (n: number) => (i: number) => decideCall(keys(i, n).map(check), TIME).args;
const keysOnly = (n: number) => (i: number) => [n, ...keys(i, n)];

/**
 * A body written against KEYS and ARGV, as a library whose one function takes them as its
 * parameters: the same text runs as a script and as a function.
 */
function asLibrary(fn: string, body: string): string {
  return `#!lua name=${fn}\nredis.register_function('${fn}', function(KEYS, ARGV)\n${body}\nend)\n`;
}

/**
 * Bare hash commands with one part of the plain script's work added, for the parts' table; the
 * reply is measured on top of the tables it is made in, so that the parts add up.
 */
const PARTS: { id: string; title: string; body: string; args?: typeof plainArgs }[] = [
  {
    id: 'part-args',
    title: "+ the plain script's arguments (3, and 3 a counter)",
    body: HASH_COMMANDS,
    args: plainArgs,
  },
  {
    id: 'part-tonumber',
    title: '+ its `tonumber` calls (2, and 5 a counter)',
    body: `
local t = redis.call('TIME')
local us = tonumber(t[2])
local now = tonumber(t[1]) * 1000 + (us - us % 1000) / 1000
for i = 1, #KEYS do
  local raw = redis.call('HMGET', KEYS[i], 't', 'w', 'c')
  local at, index, count = tonumber(raw[1]), tonumber(raw[2]), tonumber(raw[3])
  local window, limit = tonumber('60000'), tonumber('1000000000')
  redis.call('HSET', KEYS[i], 't', t[1], 'w', '1', 'c', '1')
end
return 1`,
  },
  {
    id: 'part-format',
    title: "+ its `string.format` calls (1, and 1 a counter), written as HSET's values",
    body: `
local t = redis.call('TIME')
local now_text = string.format('%d', 1764800000123)
for i = 1, #KEYS do
  redis.call('HMGET', KEYS[i], 't', 'w', 'c')
  redis.call('HSET', KEYS[i], 't', now_text, 'w', '1', 'c', string.format('%d', 1234))
end
return 1`,
  },
  {
    id: 'part-tables',
    title: '+ its two tables (21 and 11 slots), made and dropped',
    body: `
local s = { 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0 }
local reply = { 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0 }
${HASH_COMMANDS}`,
  },
  {
    id: 'part-reply',
    title: '+ its two tables, and the reply (3n + 2 integers) filled in one and returned',
    body: HASH_COMMANDS.replace(
      /return 1$/,
      `local s = { 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0 }
local reply = { 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0 }
local n = #KEYS
for i = 1, n do
  reply[3 * i - 1], reply[3 * i], reply[3 * i + 1] = 1, 999999999, 59000
end
reply[3 * n + 2], reply[3 * n + 3] = 1764800000123, nil
reply[1] = 1
return reply`,
    ),
  },
  {
    id: 'part-pcall',
    title: '+ `redis.pcall` and its error checks instead of `redis.call`',
    body: `
local t = redis.pcall('TIME')
if t.err then return t end
for i = 1, #KEYS do
  local raw = redis.pcall('HMGET', KEYS[i], 't', 'w', 'c')
  if raw.err then return raw end
  local set = redis.pcall('HSET', KEYS[i], 't', t[1], 'w', '1', 'c', '1')
  if type(set) == 'table' then return set end
end
return 1`,
  },
];

/** Throws unless `text` holds `from` exactly once: the script changed, and so must the bench. */
function assertOnce(text: string, from: string | RegExp, what: string): void {
  const count =
    typeof from === 'string'
      ? text.split(from).length - 1
      : (text.match(new RegExp(from.source, `g${from.flags}`)) ?? []).length;
  if (count !== 1) {
    throw new Error(
      `lua/plain_fixed_window.lua has ${what} ${count} times, not once: update bench/instructionVariants.ts`,
    );
  }
}

function replaceOnce(text: string, from: string | RegExp, to: string, what: string): string {
  assertOnce(text, from, what);
  return text.replace(from, () => to);
}

/**
 * The plain fixed-window code (its body, as the library holds it) as a library of its own, whose
 * one function is its entry point.
 */
export function plainAsLibrary(fn: string, body = decisionCode().bodies.fixedWindow): string {
  assertOnce(body, /^local function plain_fixed_window\(/m, 'its entry point');
  return `#!lua name=${fn}\n${body}\nredis.register_function('${fn}', plain_fixed_window)\n`;
}

/**
 * The same script on a counter packed in one string "t:w:c": read with GET, written with
 * SET … PX on a window's first write (the TTL that PEXPIRE set) and SET … KEEPTTL after, once per
 * call as the script writes; everything else is the script's own.
 */
export function packedScript(script = decisionCode().bodies.fixedWindow): string {
  let text = replaceOnce(
    script,
    /^local function flush\(\)\n[\s\S]*?\nend\n/m,
    `local function flush()
  for b = 1, 6 * loaded, 6 do
    if st[b + 4] then
      local value = st[b + 4] .. ':' .. string.format('%d', st[b + 2]) ..
        ':' .. string.format('%d', st[b + 3])
      local set
      if st[b + 5] then
        set = redis.pcall('SET', st[b], value, 'PX', st[b + 5])
      else
        set = redis.pcall('SET', st[b], value, 'KEEPTTL')
      end
      if set.err then error(refused(set, 'set')) end
    end
  end
end
`,
    'its flush function',
  );
  text = replaceOnce(
    text,
    `  local raw = redis.pcall('HMGET', key, 't', 'w', 'c')
  if raw.err then return nil, refused(raw, 'hmget') end
  local t, w, c = raw[1], raw[2], raw[3]
`,
    `  local raw = redis.pcall('GET', key)
  if type(raw) == 'table' then return nil, refused(raw, 'get') end
  local t, w, c = nil, nil, nil
  if raw then
    t, w, c = string.match(raw, '^([^:]+):([^:]+):([^:]+)$')
    if not t then return nil, FOREIGN end
  end
`,
    'its HMGET of a counter',
  );
  return text;
}

function bothCalls(id: string, title: string, body: string, counts: number[], args = keysOnly) {
  return counts.flatMap((n) => [
    { id, title, via: 'EVALSHA' as const, counters: n, code: body, args: args(n) },
    {
      id,
      title,
      via: 'FCALL' as const,
      counters: n,
      code: asLibrary(`bench_${id.replaceAll('-', '_')}`, body),
      fn: `bench_${id.replaceAll('-', '_')}`,
      args: args(n),
    },
  ]);
}

export function instructionVariants(): CountedVariant[] {
  const decision = loadDecisionScript();
  const plain = loadFixedWindowScript();
  const { library } = decisionCode();
  const counts = [1, 3];
  const variants: CountedVariant[] = [
    ...counts.map((n) => ({
      id: 'decision',
      title: "tollgate's decision script",
      via: 'EVALSHA' as const,
      counters: n,
      code: decision,
      args: (i: number) => decideArgs(keys(i, n).map(check), TIME),
    })),
    ...counts.map((n) => ({
      id: 'plain',
      title: "tollgate's plain fixed-window script",
      via: 'EVALSHA' as const,
      counters: n,
      code: plain,
      args: plainArgs(n),
    })),
    ...counts.map((n) => ({
      id: 'decision',
      title: "tollgate's decision script",
      via: 'FCALL' as const,
      counters: n,
      code: library.code,
      fn: library.functions.decision,
      args: (i: number) => decideArgs(keys(i, n).map(check), TIME),
    })),
    ...counts.map((n) => ({
      id: 'plain',
      title: "tollgate's plain fixed-window script",
      via: 'FCALL' as const,
      counters: n,
      code: library.code,
      fn: library.functions.fixedWindow,
      args: plainArgs(n),
    })),
    ...counts.map((n) => ({
      id: 'plain-batch',
      title: `tollgate's plain fixed-window script, a batch of ${BATCH} checks of one tenant (per call)`,
      via: 'FCALL' as const,
      counters: n,
      code: library.code,
      fn: library.functions.fixedWindow,
      args: (i: number) =>
        batchCall(
          Array.from({ length: BATCH }, () => ({
            checks: keys(i, n).map(check),
            nowMs: undefined,
          })),
          0,
        ).args,
    })),
    ...counts.map((n) => ({
      id: 'packed',
      title: 'the same logic on a packed string counter (GET, SET … PX or KEEPTTL)',
      via: 'FCALL' as const,
      counters: n,
      code: plainAsLibrary('bench_plain_packed', packedScript()),
      fn: 'bench_plain_packed',
      args: plainArgs(n),
    })),
    ...bothCalls('one', '`return 1`, no keys', 'return 1', [0]),
    ...bothCalls('hash', 'bare commands: TIME, HMGET t w c, HSET t w c', HASH_COMMANDS, counts),
    ...bothCalls('string', 'bare commands: TIME, GET, SET … KEEPTTL', STRING_COMMANDS, counts),
  ];
  for (const part of PARTS) {
    for (const n of counts) {
      const fn = `bench_${part.id.replaceAll('-', '_')}`;
      variants.push({
        id: part.id,
        title: part.title,
        via: 'FCALL',
        counters: n,
        code: asLibrary(fn, part.body),
        fn,
        args: (part.args ?? keysOnly)(n),
      });
    }
  }
  return variants;
}
