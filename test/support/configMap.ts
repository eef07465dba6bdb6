import { mkdirSync, readdirSync, renameSync, rmSync, symlinkSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';

let published = 0;

/**
 * Publishes `files` into `dir` as the kubelet updates a ConfigMap volume: the files go into a
 * new timestamped directory, a temporary `..data` symlink to it is renamed over `..data`, each
 * file is a symlink through `..data` (`config.yaml -> ..data/config.yaml`), the symlinks of keys
 * that are gone are removed, and so is the previous timestamped directory.
 */
export function publishConfigMap(dir: string, files: Record<string, string>): void {
  const previous = readdirSync(dir).filter((name) => name.startsWith('..2024'));
  const stamp = `..2024_01_01_00_00_${String(published++).padStart(2, '0')}.${process.pid}`;
  mkdirSync(join(dir, stamp));
  for (const [name, text] of Object.entries(files)) writeFileSync(join(dir, stamp, name), text);
  symlinkSync(stamp, join(dir, '..data_tmp'));
  renameSync(join(dir, '..data_tmp'), join(dir, '..data'));
  for (const name of Object.keys(files)) {
    try {
      symlinkSync(join('..data', name), join(dir, name));
    } catch (error) {
      if ((error as NodeJS.ErrnoException).code !== 'EEXIST') throw error;
    }
  }
  for (const name of readdirSync(dir)) {
    if (!name.startsWith('.') && !(name in files)) rmSync(join(dir, name));
  }
  for (const name of previous) rmSync(join(dir, name), { recursive: true });
}
