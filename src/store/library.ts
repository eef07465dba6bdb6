// The decision code of lua/, in the two forms Redis runs it: a library of functions, loaded once
// and called by FCALL, and the same code as scripts, run by EVALSHA where functions are refused.
import { createHash } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';

/** Which entry point a call runs: the decision script, or the plain fixed-window one. */
export type ScriptName = 'decision' | 'fixedWindow';

/**
 * Each entry point: the files joined into its code, in order (helpers, then the algorithms that
 * register themselves, then the dispatcher), and the local function that the code ends by
 * defining, which takes (KEYS, ARGV).
 */
const ENTRIES: Readonly<Record<ScriptName, { files: readonly string[]; entry: string }>> = {
  decision: {
    files: [
      'lib.lua',
      'fixed_window.lua',
      'sliding_window.lua',
      'token_bucket.lua',
      'calendar_window.lua',
      'dispatch.lua',
    ],
    entry: 'decision',
  },
  fixedWindow: { files: ['plain_fixed_window.lua'], entry: 'plain_fixed_window' },
};

const NAMES: readonly ScriptName[] = ['decision', 'fixedWindow'];

/** The suffix of each entry point's function name in the library. */
const SUFFIXES: Readonly<Record<ScriptName, string>> = {
  decision: 'decide',
  fixedWindow: 'fixed_window',
};

export interface FunctionLibrary {
  /** `tollgate_` and 16 hex digits of the code's SHA-256: another version's code is another name. */
  name: string;
  /** What FUNCTION LOAD is sent. */
  code: string;
  /** The function each entry point is registered as, named after the library. */
  functions: Readonly<Record<ScriptName, string>>;
}

export interface DecisionCode {
  /** Each entry point's code, the files joined, ending by defining its entry function. */
  bodies: Readonly<Record<ScriptName, string>>;
  /** Each entry point as a script, for EVAL and EVALSHA. */
  scripts: Readonly<Record<ScriptName, string>>;
  library: FunctionLibrary;
}

let cached: DecisionCode | undefined;

/**
 * The decision code, read from lua/ once. The library's name is a hash of the code, so two
 * versions of tollgate on one Redis (a rolling upgrade, or two deployments on other
 * CACHE_KEY_PREFIXes) each load and call their own library, and neither ever replaces the other's.
 */
export function decisionCode(): DecisionCode {
  if (cached !== undefined) return cached;
  const dir = new URL('../../lua/', import.meta.url);
  const read = (file: string) => readFileSync(fileURLToPath(new URL(file, dir)), 'utf8');
  const bodies = {} as Record<ScriptName, string>;
  for (const name of NAMES) bodies[name] = ENTRIES[name].files.map(read).join('\n');

  const scripts = {} as Record<ScriptName, string>;
  for (const name of NAMES) {
    // The chunk's own locals KEYS and ARGV shadow the globals that EVAL sets: kept first. The
    // third argument tells the entry point it runs as a script, which keeps nothing between calls.
    scripts[name] =
      'local EVAL_KEYS, EVAL_ARGV = KEYS, ARGV\n' +
      `${bodies[name]}\nreturn ${ENTRIES[name].entry}(EVAL_KEYS, EVAL_ARGV, true)\n`;
  }

  const hash = createHash('sha256');
  for (const name of NAMES) hash.update(bodies[name]).update('\0');
  const libraryName = `tollgate_${hash.digest('hex').slice(0, 16)}`;
  const functions = {} as Record<ScriptName, string>;
  // Each entry point in a block of its own, so that the two share no local.
  const blocks = NAMES.map((name) => {
    functions[name] = `${libraryName}_${SUFFIXES[name]}`;
    return (
      `do\n${bodies[name]}\n` +
      `redis.register_function('${functions[name]}', ${ENTRIES[name].entry})\nend\n`
    );
  });
  const code = `#!lua name=${libraryName}\n${blocks.join('')}`;
  cached = { bodies, scripts, library: { name: libraryName, code, functions } };
  return cached;
}

/** A script's SHA-1, as EVALSHA names it. */
export function scriptSha(lua: string): string {
  return createHash('sha1').update(lua).digest('hex');
}
