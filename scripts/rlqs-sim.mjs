// `node scripts/rlqs-sim.mjs --print-binary`: builds the tests' fleet simulator of Envoy's
// rate_limit_quota filter, the Go program in test/rlqs/sim, and prints the path of its binary. It
// is built once per version of its sources into .cache/rlqs-sim/<hash>/; test/support/rlqsSim.ts
// runs it. Any other arguments run the binary with them (it reads a scenario on standard input).
import { join } from 'node:path';
import { buildOnce, printOrRun, root } from './goBuild.mjs';

function fail(message) {
  console.error(`rlqs-sim: ${message}`);
  process.exit(2);
}

const buildSimulator = () =>
  buildOnce({
    name: 'rlqs-sim',
    sources: join(root, 'test', 'rlqs', 'sim'),
    what: "the tests' RLQS fleet simulator (test/rlqs/sim)",
    needs: '1.26',
    fail,
  });

printOrRun(buildSimulator(), process.argv.slice(2), fail);
