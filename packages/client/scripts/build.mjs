// Builds the package: the protos the client loads, copied from the repository's proto/ (their one
// source), and the repository's LICENSE, then the CommonJS build in dist/, which the ES entry in esm/ re-exports.
import { execFileSync } from 'node:child_process';
import { cpSync, mkdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';

const packageDir = join(dirname(fileURLToPath(import.meta.url)), '..');
const sourceDir = join(packageDir, '..', '..', 'proto');
const protoDir = join(packageDir, 'proto');

/** rls.proto and the files it imports, transitively; google/protobuf/* come with protobufjs. */
function protoClosure(file, found = new Set()) {
  if (found.has(file) || file.startsWith('google/protobuf/')) return found;
  found.add(file);
  const text = readFileSync(join(sourceDir, file), 'utf8');
  for (const [, imported] of text.matchAll(/^import\s+"([^"]+)";/gm)) protoClosure(imported, found);
  return found;
}

rmSync(protoDir, { recursive: true, force: true });
for (const file of protoClosure('envoy/service/ratelimit/v3/rls.proto')) {
  mkdirSync(dirname(join(protoDir, file)), { recursive: true });
  cpSync(join(sourceDir, file), join(protoDir, file));
}

// The repository's license, which the package's tarball must carry too.
cpSync(join(packageDir, '..', '..', 'LICENSE'), join(packageDir, 'LICENSE'));

const distDir = join(packageDir, 'dist');
rmSync(distDir, { recursive: true, force: true });
const tsc = createRequire(import.meta.url).resolve('typescript/bin/tsc');
execFileSync(process.execPath, [tsc, '-p', join(packageDir, 'tsconfig.json')], {
  stdio: 'inherit',
});
// The package is "type": "module" for its TypeScript sources; its build is CommonJS.
writeFileSync(join(distDir, 'package.json'), '{ "type": "commonjs" }\n');
