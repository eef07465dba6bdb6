// `node scripts/helm.mjs --print-binary`: installs Helm from its Go module, at the version below,
// into .cache/helm/<version>/ once, and prints the binary's path. Any other arguments run that
// helm with them (`node scripts/helm.mjs lint deploy/helm/tollgate`), its exit code passing
// through. The tests of the chart (test/integration/kubernetes.test.ts) and
// scripts/render-kubernetes.mjs use it; nothing else needs Helm installed.
import { pathToFileURL } from 'node:url';
import { installOnce, printOrRun } from './goBuild.mjs';

const HELM_VERSION = 'v3.22.0';
// The Kubernetes version of the client-go that this Helm's go.mod pins (v0.37): Helm's own
// release build stamps it, as the default of `helm template`'s capabilities and of the lint's
// deprecation checks. Unstamped, both would assume Kubernetes 1.20.
const KUBE_MINOR = '37';

function fail(message) {
  console.error(`helm: ${message}`);
  process.exit(2);
}

export const installHelm = () =>
  installOnce({
    name: 'helm',
    pkg: 'helm.sh/helm/v3/cmd/helm',
    version: HELM_VERSION,
    ldflags: [
      '-s -w',
      `-X helm.sh/helm/v3/internal/version.version=${HELM_VERSION}`,
      ...['pkg/lint/rules', 'pkg/chartutil'].flatMap((pkg) => [
        `-X helm.sh/helm/v3/${pkg}.k8sVersionMajor=1`,
        `-X helm.sh/helm/v3/${pkg}.k8sVersionMinor=${KUBE_MINOR}`,
      ]),
    ].join(' '),
    what: 'Helm, to lint and render the chart in deploy/helm/tollgate',
    needs: '1.26',
    fail,
  });

if (import.meta.url === pathToFileURL(process.argv[1] ?? '').href) {
  printOrRun(installHelm(), process.argv.slice(2), fail);
}
