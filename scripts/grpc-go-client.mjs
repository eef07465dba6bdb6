// `node scripts/grpc-go-client.mjs --print-binary`: builds the tests' grpc-go client, the Go
// program in test/grpc-go/client, and prints the path of its binary. It is built once per version
// of its sources into .cache/grpc-go-client/<hash>/. Any other arguments run the binary with them.
import { join } from 'node:path';
import { buildOnce, printOrRun, root } from './goBuild.mjs';

function fail(message) {
  console.error(`grpc-go-client: ${message}`);
  process.exit(2);
}

const buildClient = () =>
  buildOnce({
    name: 'grpc-go-client',
    sources: join(root, 'test', 'grpc-go', 'client'),
    what: "the tests' grpc-go client (test/grpc-go/client)",
    needs: '1.26',
    fail,
  });

printOrRun(buildClient(), process.argv.slice(2), fail);
