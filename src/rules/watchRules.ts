/**
 * Keeps the rules current. fs.watch on the rules' directory sees edits, new and removed files and
 * a Kubernetes ConfigMap's `..data` symlink swap; bursts of events are debounced into one check.
 * A slow poll runs the same check, for events the watcher misses: an edit behind a symlink to
 * another directory, a filesystem without inotify, a watcher that died with its directory.
 *
 * A check fingerprints the rules files and loads them only when the fingerprint changed, so
 * events that change nothing (a touch, a dotfile, the same content renamed over) cost no reload.
 * Fingerprinting never holds the event loop, whatever sits in the directory: files are stat'ed
 * and read asynchronously; only regular files within the size limit are read, never a FIFO or a
 * device; and a file is read again only when its size, times or inode changed, so a refused file
 * costs nothing until someone changes it.
 *
 * A changed fingerprint must then hold still for `settleMs` before it is loaded, so that a file
 * still being written is not loaded half-written: each write starts the wait again. The loads
 * themselves go through `load`, one at a time; a change during a load is checked after it.
 */

import { createHash } from 'node:crypto';
import {
  closeSync,
  constants,
  fstatSync,
  openSync,
  readdirSync,
  readSync,
  statSync,
  watch,
  type BigIntStats,
  type FSWatcher,
} from 'node:fs';
import { open, readdir, stat } from 'node:fs/promises';
import { dirname, join } from 'node:path';
import { MAX_RULES_FILE_BYTES } from './loadRules.js';
import type { RuleSet } from './types.js';

export interface WatchRulesOptions {
  /** A rules file, or a directory of `*.yaml`/`*.yml` files (dotfiles skipped). */
  path: string;
  /** Loads the rules; rejects on bad rules. */
  load: () => Promise<RuleSet>;
  /** A new, complete rule set: the caller swaps it in whole. */
  onReload: (rules: RuleSet) => void;
  /** A reload failed: the caller keeps serving the previous rules. */
  onError: (error: unknown) => void;
  pollIntervalMs: number;
  /** How long a burst of events must go quiet before the check runs. */
  debounceMs?: number;
  /** How long a change must hold still before it is loaded (CONFIG_SETTLE_TIME); 0: at once. */
  settleMs?: number;
  /** false: poll only, for filesystems without inotify. */
  watch?: boolean;
}

export interface RulesWatcher {
  /** Loads the rules now, changed or not (SIGHUP), after any load under way. */
  reload(): void;
  close(): void;
}

/** Where the checks stand, for the check step and for the watcher's controls. */
interface CheckState {
  closed: boolean;
  /** The fingerprint of the files last loaded, or tried. */
  loaded: string;
  /** A changed fingerprint waiting to hold still, and since when. */
  candidate: { fingerprint: string; since: number } | undefined;
  /** The next check loads, changed or not (a reload). */
  forced: boolean;
  /** A check runs; another asked for meanwhile runs after it (`again`). */
  busy: boolean;
  again: boolean;
  /** The check due when a change will have held still. */
  settle: NodeJS.Timeout | undefined;
}

/** What a check reads and calls, with the state it changes. */
interface Checks {
  path: string;
  fingerprints: Fingerprinter;
  settleMs: number;
  load: WatchRulesOptions['load'];
  onReload: WatchRulesOptions['onReload'];
  onError: WatchRulesOptions['onError'];
  state: CheckState;
}

/** Runs a check after `ms`; the timer keeps no process alive. */
function checkLater(checks: Checks, ms: number): NodeJS.Timeout {
  const timer = setTimeout(() => check(checks), ms);
  timer.unref();
  return timer;
}

/** Runs a check now, or after the one under way: never two at once. */
function check(checks: Checks): void {
  const { state } = checks;
  if (state.closed) return;
  if (state.busy) {
    state.again = true;
    return;
  }
  state.busy = true;
  checkOnce(checks)
    .catch(checks.onError)
    .finally(() => {
      state.busy = false;
      if (state.again) {
        state.again = false;
        check(checks);
      }
    });
}

/**
 * One check: fingerprints the files and, when they changed and have held still for `settleMs`
 * (or when forced), loads them and hands the rules over.
 */
async function checkOnce(checks: Checks): Promise<void> {
  const { state, settleMs } = checks;
  const current = await checks.fingerprints.of(checks.path);
  if (state.closed) return;
  if (!state.forced) {
    if (current === state.loaded) {
      state.candidate = undefined;
      return;
    }
    if (state.candidate?.fingerprint !== current) {
      state.candidate = { fingerprint: current, since: now() };
    }
    const waited = now() - state.candidate.since;
    if (waited < settleMs) {
      clearTimeout(state.settle);
      state.settle = checkLater(checks, settleMs - waited);
      return;
    }
  }
  state.forced = false;
  state.candidate = undefined;
  // Taken before loading: a change during the load shows up at the next check.
  state.loaded = current;
  let rules: RuleSet;
  try {
    rules = await checks.load();
  } catch (error) {
    if (!state.closed) checks.onError(error);
    return;
  }
  if (state.closed) return;
  try {
    checks.onReload(rules);
  } catch (error) {
    checks.onError(error);
  }
}

/** The watcher on the rules' directory, which directory it is, and the debounce of its events. */
interface DirectoryWatch {
  watcher: FSWatcher | undefined;
  // The watched directory's identity: when it is replaced, the old watcher hears nothing more.
  identity: string | undefined;
  debounce: NodeJS.Timeout | undefined;
}

function stopWatching(watching: DirectoryWatch): void {
  watching.watcher?.close();
  watching.watcher = undefined;
  watching.identity = undefined;
}

/**
 * Watches the directory that holds the rules, unless the same directory is watched already: a
 * replaced one is watched anew. Each event calls `onEvent`.
 */
function ensureWatching(watching: DirectoryWatch, path: string, onEvent: () => void): void {
  const directory = isDirectory(path) ? path : dirname(path);
  const identity = directoryIdentity(directory);
  if (watching.watcher !== undefined && identity === watching.identity) return;
  stopWatching(watching);
  if (identity === undefined) return; // The poll tries again.
  let watcher: FSWatcher;
  try {
    watcher = watch(directory, { persistent: false }, onEvent);
  } catch {
    return; // No inotify, no permission, or the directory just went: the poll carries on.
  }
  watching.watcher = watcher;
  watching.identity = identity;
  watcher.on('error', () => stopWatching(watching));
}

/**
 * Starts watching. The files as they are now count as loaded: the caller loads the rules at
 * start-up, and should call this right after.
 */
export function watchRules(options: WatchRulesOptions): RulesWatcher {
  const { path, load, onReload, onError, pollIntervalMs } = options;
  const debounceMs = options.debounceMs ?? 100;
  const fingerprints = createFingerprinter();
  const state: CheckState = {
    closed: false,
    loaded: fingerprints.now(path),
    candidate: undefined,
    forced: false,
    busy: false,
    again: false,
    settle: undefined,
  };
  const checks: Checks = {
    path,
    fingerprints,
    settleMs: options.settleMs ?? 0,
    load,
    onReload,
    onError,
    state,
  };
  const watching: DirectoryWatch = { watcher: undefined, identity: undefined, debounce: undefined };
  // A burst of events becomes one check, once it has gone quiet.
  const debounced = (): void => {
    clearTimeout(watching.debounce);
    watching.debounce = checkLater(checks, debounceMs);
  };
  const keepWatching = (): void => {
    if (state.closed || options.watch === false) return;
    ensureWatching(watching, path, debounced);
  };

  keepWatching();
  const poll = setInterval(() => {
    keepWatching();
    check(checks);
  }, pollIntervalMs);
  poll.unref();

  return {
    reload() {
      state.forced = true;
      check(checks);
    },
    close() {
      state.closed = true;
      clearInterval(poll);
      clearTimeout(watching.debounce);
      clearTimeout(state.settle);
      stopWatching(watching);
    },
  };
}

const now = (): number => performance.now();

function isDirectory(path: string): boolean {
  try {
    return statSync(path).isDirectory();
  } catch {
    return false;
  }
}

/** Which directory, and which one by that name: a removed and recreated directory differs. */
function directoryIdentity(directory: string): string | undefined {
  try {
    const stats = statSync(directory);
    return stats.isDirectory() ? `${directory}\0${stats.dev}:${stats.ino}` : undefined;
  } catch {
    return undefined;
  }
}

/**
 * A hash of what `loadRules` would read: the non-dot `*.yaml`/`*.yml` files under `path` (or the
 * file itself), sorted, each name with its content, links followed. A file that is not regular,
 * or is over the size limit, enters with its kind or size and times instead of its content; one
 * that cannot be read, with its error code, so a change between failing and succeeding counts.
 * Contents are hashed once per version of a file (its inode, size and times).
 *
 * `of` reads asynchronously, for the checks. `now` reads synchronously, once, at start-up, right
 * after the rules were loaded and before anything is served, so that no change made in between
 * can pass for the files loaded.
 */
function createFingerprinter() {
  const hashes = new Map<string, { version: string; hash: string }>();

  /** The file's entry from its stats, or its cached hash; undefined when it must be read. */
  function fromStats(file: string, stats: BigIntStats): string | { version: string } {
    const version = `${stats.dev}:${stats.ino}:${stats.size}:${stats.mtimeNs}:${stats.ctimeNs}`;
    const kind = stats.isDirectory()
      ? 'directory'
      : !stats.isFile()
        ? 'special'
        : stats.size > BigInt(MAX_RULES_FILE_BYTES)
          ? 'large'
          : undefined;
    if (kind !== undefined) {
      hashes.delete(file);
      return `${kind}\0${version}`;
    }
    const known = hashes.get(file);
    return known?.version === version ? known.hash : { version };
  }

  const failed = (file: string, error: unknown, version = ''): string => {
    hashes.delete(file);
    return `error\0${(error as NodeJS.ErrnoException).code ?? 'unknown'}\0${version}`;
  };

  function remember(file: string, version: string, hash: string): string {
    hashes.set(file, { version, hash });
    return hash;
  }

  function combine(path: string, names: string[] | undefined, entries: string[]): string {
    const all = createHash('sha256');
    const files = names === undefined ? [path] : names.map((name) => join(path, name));
    const seen = new Set(files);
    for (const file of hashes.keys()) if (!seen.has(file)) hashes.delete(file);
    (names ?? ['']).forEach((name, i) => all.update(`${name}\0${entries[i]}\n`));
    return all.digest('hex');
  }

  const ruleNames = (names: string[]): string[] =>
    names.filter((n) => !n.startsWith('.') && (n.endsWith('.yaml') || n.endsWith('.yml'))).sort();

  return {
    async of(path: string): Promise<string> {
      let names: string[] | undefined;
      try {
        if ((await stat(path)).isDirectory()) names = ruleNames(await readdir(path));
      } catch (error) {
        return failed(path, error);
      }
      const files = names === undefined ? [path] : names.map((name) => join(path, name));
      const entries: string[] = [];
      for (const file of files) {
        let found: string | { version: string };
        try {
          found = fromStats(file, await stat(file, { bigint: true }));
        } catch (error) {
          entries.push(failed(file, error));
          continue;
        }
        if (typeof found === 'string') entries.push(found);
        else {
          const hash = await readHash(file).catch((error) => failed(file, error, found.version));
          entries.push(remember(file, found.version, hash));
        }
      }
      return combine(path, names, entries);
    },

    now(path: string): string {
      let names: string[] | undefined;
      try {
        if (statSync(path).isDirectory()) names = ruleNames(readdirSync(path));
      } catch (error) {
        return failed(path, error);
      }
      const files = names === undefined ? [path] : names.map((name) => join(path, name));
      const entries = files.map((file) => {
        let found: string | { version: string };
        try {
          found = fromStats(file, statSync(file, { bigint: true }));
        } catch (error) {
          return failed(file, error);
        }
        if (typeof found === 'string') return found;
        let hash: string;
        try {
          hash = readHashNow(file);
        } catch (error) {
          hash = failed(file, error, found.version);
        }
        return remember(file, found.version, hash);
      });
      return combine(path, names, entries);
    },
  };
}

type Fingerprinter = ReturnType<typeof createFingerprinter>;

const READ_FLAGS = constants.O_RDONLY | constants.O_NONBLOCK;

/** A regular file's content hash, read without blocking and never past the size limit. */
async function readHash(file: string): Promise<string> {
  const handle = await open(file, READ_FLAGS);
  try {
    if (!(await handle.stat()).isFile()) return 'special';
    const hash = createHash('sha256');
    const buffer = Buffer.alloc(64 * 1024);
    let total = 0;
    for (;;) {
      const { bytesRead } = await handle.read(buffer, 0, buffer.length, null);
      if (bytesRead === 0) return hash.digest('hex');
      total += bytesRead;
      if (total > MAX_RULES_FILE_BYTES) return `large\0${total}`;
      hash.update(buffer.subarray(0, bytesRead));
    }
  } finally {
    await handle.close();
  }
}

/** The same, synchronously: for the fingerprint taken at start-up. */
function readHashNow(file: string): string {
  const fd = openSync(file, READ_FLAGS);
  try {
    if (!fstatSync(fd).isFile()) return 'special';
    const hash = createHash('sha256');
    const buffer = Buffer.alloc(64 * 1024);
    let total = 0;
    for (;;) {
      const bytesRead = readSync(fd, buffer, 0, buffer.length, null);
      if (bytesRead === 0) return hash.digest('hex');
      total += bytesRead;
      if (total > MAX_RULES_FILE_BYTES) return `large\0${total}`;
      hash.update(buffer.subarray(0, bytesRead));
    }
  } finally {
    closeSync(fd);
  }
}
