// `npm run build`: @tollgate/client first, then src/ into dist/, then a copy of the client's build
// into dist/vendor/client/, which the service's own imports of '@tollgate/client' are pointed at.
// So the service never loads the client package at run time: its tarball installs without it, and
// rebuilding the client in a checkout cannot pull files from under a running service.
import { execFileSync } from 'node:child_process';
import { cpSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { dirname, join, relative, sep } from 'node:path';
import { fileURLToPath } from 'node:url';

const root = join(dirname(fileURLToPath(import.meta.url)), '..');
for (const args of [
  ['packages/client/scripts/build.mjs'],
  ['node_modules/typescript/bin/tsc', '-p', 'tsconfig.build.json'],
]) {
  execFileSync(process.execPath, args, { cwd: root, stdio: 'inherit' });
}

const dist = join(root, 'dist');
const vendor = join(dist, 'vendor', 'client');
rmSync(vendor, { recursive: true, force: true });
for (const part of ['dist', 'esm', 'proto', 'LICENSE']) {
  cpSync(join(root, 'packages', 'client', part), join(vendor, part), { recursive: true });
}

/** Every emitted module and declaration of the service, outside the vendored copy. */
function emitted(dir) {
  return readdirSync(dir, { withFileTypes: true }).flatMap((entry) => {
    const path = join(dir, entry.name);
    if (entry.isDirectory()) return path === join(dist, 'vendor') ? [] : emitted(path);
    return /\.(js|d\.ts)$/.test(entry.name) ? [path] : [];
  });
}

// A quoted specifier, in `from '...'`, `import('...')` and declarations' `import("...")` alike.
const specifier = /(['"])@tollgate\/client\1/g;
for (const file of emitted(dist)) {
  const text = readFileSync(file, 'utf8');
  if (text.match(specifier) === null) continue;
  const entry = relative(dirname(file), join(vendor, 'esm', 'index.js'))
    .split(sep)
    .join('/');
  const target = entry.startsWith('.') ? entry : `./${entry}`;
  writeFileSync(
    file,
    text.replace(specifier, (_, quote) => `${quote}${target}${quote}`),
  );
}
