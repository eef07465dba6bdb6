/**
 * Keeps the rules current. fs.watch on the rules' directory sees edits, new and removed files and
 * a Kubernetes ConfigMap's `..data` symlink swap; bursts of events are debounced into one check.
 * A check fingerprints the rules files and calls `load` only when the fingerprint changed, so
 * events that change nothing (a touch, a dotfile) cost no reload. A slow poll runs the same check,
 * for events the watcher misses: an edit behind a symlink to another directory, a filesystem
 * without inotify, a watcher that died with its directory.
 */

import { createHash } from 'node:crypto';
import { readFileSync, readdirSync, statSync, watch, type FSWatcher } from 'node:fs';
import { dirname, join } from 'node:path';
import type { RuleSet } from './types.js';

export interface WatchRulesOptions {
  /** A rules file, or a directory of `*.yaml`/`*.yml` files (dotfiles skipped). */
  path: string;
  /** Loads the rules; throws on bad rules. */
  load: () => RuleSet;
  /** A new, complete rule set: the caller swaps it in whole. */
  onReload: (rules: RuleSet) => void;
  /** A reload failed: the caller keeps serving the previous rules. */
  onError: (error: unknown) => void;
  pollIntervalMs: number;
  /** How long a burst of events must go quiet before the check runs. */
  debounceMs?: number;
  /** false: poll only, for filesystems without inotify. */
  watch?: boolean;
}

export interface RulesWatcher {
  close(): void;
}

/**
 * Starts watching. The fingerprint of the files as they are now counts as loaded: the caller
 * loads the rules at start-up, and should call this right after.
 */
export function watchRules(options: WatchRulesOptions): RulesWatcher {
  const { path, load, onReload, onError, pollIntervalMs } = options;
  const debounceMs = options.debounceMs ?? 100;
  let closed = false;
  let fingerprint = fingerprintRules(path);
  let debounce: NodeJS.Timeout | undefined;
  let watcher: FSWatcher | undefined;
  // The watched directory's identity: when it is replaced, the old watcher hears nothing more.
  let watchedIdentity: string | undefined;

  // Fingerprint before loading: a change during the load then shows up at the next check.
  const check = (): void => {
    if (closed) return;
    const current = fingerprintRules(path);
    if (current === fingerprint) return;
    fingerprint = current;
    let rules: RuleSet;
    try {
      rules = load();
    } catch (error) {
      onError(error);
      return;
    }
    try {
      onReload(rules);
    } catch (error) {
      onError(error);
    }
  };

  const stopWatching = (): void => {
    watcher?.close();
    watcher = undefined;
    watchedIdentity = undefined;
  };

  const ensureWatching = (): void => {
    if (closed || options.watch === false) return;
    const directory = isDirectory(path) ? path : dirname(path);
    const identity = directoryIdentity(directory);
    if (watcher !== undefined && identity === watchedIdentity) return;
    stopWatching();
    if (identity === undefined) return; // The poll tries again.
    try {
      watcher = watch(directory, { persistent: false }, () => {
        clearTimeout(debounce);
        debounce = setTimeout(check, debounceMs);
        debounce.unref();
      });
    } catch {
      return; // No inotify, no permission, or the directory just went: the poll carries on.
    }
    watchedIdentity = identity;
    watcher.on('error', stopWatching);
  };

  ensureWatching();
  const poll = setInterval(() => {
    ensureWatching();
    check();
  }, pollIntervalMs);
  poll.unref();

  return {
    close() {
      closed = true;
      clearInterval(poll);
      clearTimeout(debounce);
      stopWatching();
    },
  };
}

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
 * file itself), sorted, each name with its content, symlinks followed. A file that cannot be read
 * enters with its error code, so a change between failing and succeeding still counts.
 */
function fingerprintRules(path: string): string {
  const hash = createHash('sha256');
  const add = (name: string, read: () => Buffer | 'directory'): void => {
    let content: Buffer | 'directory';
    try {
      content = read();
    } catch (error) {
      hash.update(`${name}\0error\0${(error as NodeJS.ErrnoException).code ?? 'unknown'}\n`);
      return;
    }
    if (content === 'directory') {
      hash.update(`${name}\0directory\n`);
      return;
    }
    hash.update(`${name}\0${content.length}\0`);
    hash.update(content);
    hash.update('\n');
  };
  try {
    if (!statSync(path).isDirectory()) {
      add('', () => readFileSync(path));
      return hash.digest('hex');
    }
    const names = readdirSync(path)
      .filter((name) => !name.startsWith('.') && (name.endsWith('.yaml') || name.endsWith('.yml')))
      .sort();
    for (const name of names) {
      const file = join(path, name);
      // loadRules skips a directory named like a rules file.
      add(name, () => (statSync(file).isDirectory() ? 'directory' : readFileSync(file)));
    }
  } catch (error) {
    hash.update(`\0error\0${(error as NodeJS.ErrnoException).code ?? 'unknown'}\n`);
  }
  return hash.digest('hex');
}
