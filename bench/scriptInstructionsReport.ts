import type { Via } from './instructionVariants.js';
import type { InstructionPlan, InstructionRow } from './scriptInstructions.js';

/**
 * The markdown of `--script-cost --instructions`: every count, then what they answer: what FCALL
 * saves over EVALSHA, what a packed string saves over a hash, and the parts of the plain script's
 * cost as a function, each measured by adding it alone to the bare commands.
 */
export interface InstructionHeader {
  command: string;
  date: string;
  redis: string;
  valgrind: string;
  machine: string;
}

type Lookup = (id: string, via: Via, counters: number) => number;

function lookup(rows: readonly InstructionRow[]): Lookup {
  return (id, via, counters) => {
    const row = rows.find((r) => r.id === id && r.via === via && r.counters === counters);
    if (!row) throw new Error(`no count for ${id} by ${via} with ${counters} counters`);
    return row.kilo;
  };
}

const k = (kilo: number) => kilo.toFixed(1);
const share = (part: number, whole: number) => `${((100 * part) / whole).toFixed(0)}%`;

function countsTable(rows: readonly InstructionRow[]): string[] {
  const seen = new Map<string, InstructionRow[]>();
  for (const row of rows) {
    const key = `${row.id} ${row.via}`;
    seen.set(key, [...(seen.get(key) ?? []), row]);
  }
  return [
    '| per call, thousands of instructions | call | 1 counter | 3 counters |',
    '| --- | --- | --- | --- |',
    ...[...seen.values()].map((group) => {
      const at = (n: number) => group.find((row) => row.counters === n);
      const one = at(1) ?? at(0);
      return `| ${group[0]!.variant} | ${group[0]!.via} | ${one ? k(one.kilo) : ''} | ${at(3) ? k(at(3)!.kilo) : ''} |`;
    }),
  ];
}

function fcallSavings(get: Lookup): string[] {
  const line = (title: string, id: string, counters: number[]) =>
    `| ${title} | ${counters
      .map((n) => {
        const saved = get(id, 'EVALSHA', n) - get(id, 'FCALL', n);
        return `${k(saved)} (${share(saved, get(id, 'EVALSHA', n))})`;
      })
      .join(' | ')} |`;
  return [
    '| FCALL saves, thousands of instructions (share of the EVALSHA call) | 1 counter | 3 counters |',
    '| --- | --- | --- |',
    line("tollgate's plain fixed-window script", 'plain', [1, 3]),
    line('bare commands, hash', 'hash', [1, 3]),
    line('bare commands, packed string', 'string', [1, 3]),
    `${line('`return 1`, no keys', 'one', [0])} |`,
  ];
}

function packedSavings(get: Lookup): string[] {
  const line = (title: string, hash: string, packed: string) => {
    const one = get(hash, 'FCALL', 1) - get(packed, 'FCALL', 1);
    const three = get(hash, 'FCALL', 3) - get(packed, 'FCALL', 3);
    return (
      `| ${title} | ${k(one)} (${share(one, get(hash, 'FCALL', 1))}) ` +
      `| ${k(three)} (${share(three, get(hash, 'FCALL', 3))}) | ${k(three / 3)} |`
    );
  };
  return [
    '| the packed string saves under FCALL, thousands of instructions (share of the hash call) | 1 counter | 3 counters | per counter, from 3 |',
    '| --- | --- | --- | --- |',
    line('the plain fixed-window logic', 'plain', 'packed'),
    line('bare commands', 'hash', 'string'),
  ];
}

/** Each part over the variant it adds to: the reply is filled in the tables made before it. */
const PARTS: { id: string; base: string; label: string }[] = [
  { id: 'part-args', base: 'hash', label: "the plain script's arguments (3, and 3 a counter)" },
  { id: 'part-tonumber', base: 'hash', label: '`tonumber` (2, and 5 a counter)' },
  { id: 'part-format', base: 'hash', label: '`string.format` (1, and 1 a counter)' },
  { id: 'part-tables', base: 'hash', label: 'its two tables (21 and 11 slots), made' },
  { id: 'part-reply', base: 'part-tables', label: 'its reply, filled and converted' },
  { id: 'part-pcall', base: 'hash', label: '`redis.pcall` and its error checks' },
];

function partsTable(get: Lookup): string[] {
  const whole = (n: number) => get('plain', 'FCALL', n);
  const bare = (n: number) => get('hash', 'FCALL', n);
  const part = ({ id, base }: { id: string; base: string }, n: number) =>
    get(id, 'FCALL', n) - get(base, 'FCALL', n);
  const cell = (kilo: number, n: number) => `${k(kilo)} (${share(kilo, whole(n))})`;
  const rest = (n: number) => whole(n) - bare(n) - PARTS.reduce((sum, p) => sum + part(p, n), 0);
  return [
    '| the plain script as a function, thousands of instructions (share of its call) | 1 counter | 3 counters |',
    '| --- | --- | --- |',
    `| the whole call | ${k(whole(1))} | ${k(whole(3))} |`,
    `| the bare commands (TIME, HMGET, HSET) | ${cell(bare(1), 1)} | ${cell(bare(3), 3)} |`,
    ...PARTS.map((p) => `| ${p.label} | ${cell(part(p, 1), 1)} | ${cell(part(p, 3), 3)} |`),
    `| the rest of its logic (what the parts above leave) | ${cell(rest(1), 1)} | ${cell(rest(3), 3)} |`,
  ];
}

export function instructionReport(
  rows: readonly InstructionRow[],
  plan: InstructionPlan,
  header: InstructionHeader,
): string {
  const get = lookup(rows);
  const recounted = rows.filter((row) => row.tries > 1).length;
  const spread = Math.max(
    ...rows.map((row) => Math.abs(row.halves[0]! - row.halves[1]!) / row.kilo),
  );
  return [
    '# What a script call costs Redis, in instructions',
    '',
    `\`${header.command}\`, ${header.date}. The instructions ${header.redis} executes per call, ` +
      `counted by ${header.valgrind}'s callgrind inside \`processInputBuffer\` (parsing the call, ` +
      'running it, its commands, garbage collection and reply conversion; not the system calls, ' +
      `the event loop or timers): for each variant, on an emptied keyspace, ${plan.warmUp} calls ` +
      `of warm-up, then ${plan.measured} counted, in pipelines of 100 over 50 tenants with the ` +
      "timing bench's arguments (fixed windows of 60 s, limit 10⁹, cost 1). Counts do not " +
      "depend on the machine's load: the two halves of each variant's counted calls differ by " +
      `at most ${(100 * spread).toFixed(2)}% (the halves of every count are in script-cost.json). ` +
      `Counted again for crossing a window boundary: ${recounted} variant${recounted === 1 ? '' : 's'}. ` +
      `Machine: ${header.machine}. Method: bench/scriptInstructions.ts.`,
    '',
    ...countsTable(rows),
    '',
    '## What FCALL saves over EVALSHA',
    '',
    'A function library runs its top level once, at FUNCTION LOAD; each FCALL runs only the ' +
      'registered callback. What FCALL saves is what EVALSHA does again on every call: its own ' +
      "overhead over FCALL's (as `return 1` shows), and running the script's top level, which " +
      'defines its helpers and constants again each time.',
    '',
    ...fcallSavings(get),
    '',
    '## What a packed string saves over a hash',
    '',
    'The plain fixed-window logic, as a function, on a hash (HMGET t w c, HSET) against a string ' +
      '"t:w:c" (GET, then SET … PX on the first write of a window, SET … KEEPTTL after).',
    '',
    ...packedSavings(get),
    '',
    "## The plain script's parts, as a function",
    '',
    'Each part is measured by adding it alone to the bare commands under FCALL (the reply, to ' +
      'the bare commands with the tables it is made in); the share is of the plain script called ' +
      'as a function.',
    '',
    ...partsTable(get),
    '',
  ].join('\n');
}
