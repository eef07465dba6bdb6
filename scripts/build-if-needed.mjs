// `npm start` runs this first: build (scripts/build.mjs) unless dist/ is newer than every source
// file, the client package's (which dist/vendor/client/ copies) and the protos included.
import { execFileSync } from 'node:child_process';
import { existsSync, readdirSync, statSync } from 'node:fs';
import { join } from 'node:path';

function newestMtime(dir) {
  let newest = 0;
  for (const entry of readdirSync(dir, { withFileTypes: true })) {
    const path = join(dir, entry.name);
    const mtime = entry.isDirectory() ? newestMtime(path) : statSync(path).mtimeMs;
    newest = Math.max(newest, mtime);
  }
  return newest;
}

const outputs = ['dist/main.js', 'dist/vendor/client/dist/index.js'];
const built =
  outputs.every((file) => existsSync(file)) &&
  Math.min(...outputs.map((file) => statSync(file).mtimeMs));
const sources = ['src', 'packages/client/src', 'proto'];
if (!built || Math.max(...sources.map(newestMtime)) > built) {
  execFileSync(process.execPath, ['scripts/build.mjs'], { stdio: 'inherit' });
}
