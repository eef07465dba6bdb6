// `npm run build`: @tollgate/client first, since the service imports it at run time through its
// link in node_modules, then src/ into dist/.
import { execFileSync } from 'node:child_process';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';

const root = join(dirname(fileURLToPath(import.meta.url)), '..');
for (const args of [
  ['packages/client/scripts/build.mjs'],
  ['node_modules/typescript/bin/tsc', '-p', 'tsconfig.build.json'],
]) {
  execFileSync(process.execPath, args, { cwd: root, stdio: 'inherit' });
}
