/**
 * Durations in Go's `time.ParseDuration` syntax, the syntax of the rules file's `window`. Parsing
 * counts in BigInt nanoseconds, as Go does, so `0.1s` is exactly 100ms and never 100.00000000000001.
 */

const NS_PER_UNIT: Readonly<Record<string, bigint>> = {
  ns: 1n,
  us: 1_000n,
  µs: 1_000n, // U+00B5 micro sign
  μs: 1_000n, // U+03BC Greek small letter mu
  ms: 1_000_000n,
  s: 1_000_000_000n,
  m: 60_000_000_000n,
  h: 3_600_000_000_000n,
};

/** Go rejects durations beyond int64 nanoseconds (about 292 years); so do we. */
const MAX_NS = 2n ** 63n - 1n;
const NS_PER_MS = 1_000_000n;

const isDigit = (c: string | undefined): boolean => c !== undefined && c >= '0' && c <= '9';

/** Parses a non-negative Go duration such as `30s`, `1h30m` or `1.5h` into milliseconds. */
export function parseGoDuration(text: string): number {
  const fail = (reason: string): never => {
    throw new Error(`invalid duration '${text}': ${reason}`);
  };
  let rest = text.startsWith('+') ? text.slice(1) : text;
  if (rest.startsWith('-')) fail('must not be negative');
  if (rest === '0') return 0;
  if (rest === '') fail('empty');

  let total = 0n;
  while (rest !== '') {
    let i = 0;
    while (isDigit(rest[i])) i++;
    const whole = rest.slice(0, i);
    let fraction = '';
    if (rest[i] === '.') {
      const start = ++i;
      while (isDigit(rest[i])) i++;
      fraction = rest.slice(start, i);
    }
    if (whole === '' && fraction === '') fail(`expected a number at '${rest}'`);
    let end = i;
    while (end < rest.length && rest[end] !== '.' && !isDigit(rest[end])) end++;
    const unitName = rest.slice(i, end);
    if (unitName === '') fail(`missing unit after '${rest.slice(0, i)}'`);
    const unit = NS_PER_UNIT[unitName] ?? fail(`unknown unit '${unitName}'`);
    // Go truncates a fraction finer than a nanosecond; BigInt division truncates the same way.
    const scale = 10n ** BigInt(fraction.length);
    total += BigInt(whole || '0') * unit + (BigInt(fraction || '0') * unit) / scale;
    if (total > MAX_NS) fail('out of range');
    rest = rest.slice(end);
  }
  return Number(total / NS_PER_MS) + Number(total % NS_PER_MS) / 1e6;
}

const FORMAT_UNITS: readonly (readonly [string, bigint])[] = [
  ['h', 3_600_000_000_000n],
  ['m', 60_000_000_000n],
  ['s', 1_000_000_000n],
  ['ms', 1_000_000n],
  ['us', 1_000n],
  ['ns', 1n],
];

/** The compact form that `parseGoDuration` reads back: `30s`, `1m30s`, `1h`, `500ms`, `0s`. */
export function formatDuration(ms: number): string {
  if (!Number.isFinite(ms) || ms < 0) throw new RangeError(`not a duration: ${ms}`);
  const wholeMs = Math.floor(ms);
  let ns = BigInt(wholeMs) * NS_PER_MS + BigInt(Math.round((ms - wholeMs) * 1e6));
  if (ns === 0n) return '0s';
  let text = '';
  for (const [name, size] of FORMAT_UNITS) {
    if (ns >= size) {
      text += `${ns / size}${name}`;
      ns %= size;
    }
  }
  return text;
}
