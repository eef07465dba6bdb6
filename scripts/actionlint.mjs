// `node scripts/actionlint.mjs [FILE...]`: checks the GitHub Actions workflows with actionlint,
// installed from its Go module at the version below into .cache/actionlint/<version>/ once. With
// no files it checks .github/workflows/, as actionlint does from the repository's root; its output
// and exit code (0 clean, 1 problems found, 2 or 3 it could not run) pass through.
// `--print-binary` installs it and prints the binary's path. test/integration/workflows.test.ts
// runs it; shellcheck, when on PATH, also checks the `run:` scripts.
import { pathToFileURL } from 'node:url';
import { installOnce, printOrRun } from './goBuild.mjs';

const ACTIONLINT_VERSION = 'v1.7.12';

function fail(message) {
  console.error(`actionlint: ${message}`);
  process.exit(3);
}

export const installActionlint = () =>
  installOnce({
    name: 'actionlint',
    pkg: 'github.com/rhysd/actionlint/cmd/actionlint',
    version: ACTIONLINT_VERSION,
    what: 'actionlint, to check the workflows in .github/workflows',
    needs: '1.25',
    fail,
  });

if (import.meta.url === pathToFileURL(process.argv[1] ?? '').href) {
  printOrRun(installActionlint(), process.argv.slice(2), fail);
}
