// `node scripts/xds-server.mjs --print-binary`: builds the tests' xDS management server, the Go
// program in test/xds/server, and prints the path of its binary. It is built once per version of
// its sources into .cache/xds-server/<hash>/; test/support/xdsServer.ts starts it. Any other
// arguments run the binary with them (e.g. `-port 18000`), its exit code passing through.
import { join } from 'node:path';
import { buildOnce, printOrRun, root } from './goBuild.mjs';

function fail(message) {
  console.error(`xds-server: ${message}`);
  process.exit(2);
}

const buildServer = () =>
  buildOnce({
    name: 'xds-server',
    sources: join(root, 'test', 'xds', 'server'),
    what: "the tests' xDS management server (test/xds/server)",
    needs: '1.26',
    fail,
  });

printOrRun(buildServer(), process.argv.slice(2), fail);
