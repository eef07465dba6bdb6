// `node scripts/egctl.mjs --print-binary`: installs Envoy Gateway's egctl from its Go module, at
// the release below, into .cache/egctl/<version>/ once, and prints the binary's path. Any other
// arguments run that egctl with them (`node scripts/egctl.mjs x validate -f policy.yaml`), its
// exit code passing through. The test of docs/envoy-gateway.md
// (test/integration/envoyGateway.test.ts) checks that page's policies with `egctl x validate`.
import { pathToFileURL } from 'node:url';
import { installOnce, printOrRun } from './goBuild.mjs';

// The release that docs/envoy-gateway.md describes; test/envoy-gateway/validate/go.mod pins the
// same one.
const EGCTL_VERSION = 'v1.9.1';

function fail(message) {
  console.error(`egctl: ${message}`);
  process.exit(2);
}

export const installEgctl = () =>
  installOnce({
    name: 'egctl',
    pkg: 'github.com/envoyproxy/gateway/cmd/egctl',
    version: EGCTL_VERSION,
    ldflags: '-s -w',
    what: "Envoy Gateway's egctl, to validate the policies in docs/envoy-gateway.md",
    needs: '1.26',
    fail,
  });

if (import.meta.url === pathToFileURL(process.argv[1] ?? '').href) {
  printOrRun(installEgctl(), process.argv.slice(2), fail);
}
