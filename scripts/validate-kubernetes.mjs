// `node scripts/validate-kubernetes.mjs FILE.yaml...` ("-" for standard input): checks Kubernetes
// manifests, such as `helm template` prints, with the Go checker in deploy/validate: every object
// decoded strictly against its API type (k8s.io/api, and the Prometheus operator's for
// ServiceMonitor), then a few checks across them. Its output and exit code (0 valid, 1 invalid,
// 2 unreadable) pass through. The binary is built once per version of its sources into
// .cache/kubernetes-validate/<hash>/; `--print-binary` builds it and prints its path.
import { join } from 'node:path';
import { buildOnce, printOrRun, root } from './goBuild.mjs';

function fail(message) {
  console.error(`validate-kubernetes: ${message}`);
  process.exit(2);
}

const binary = buildOnce({
  name: 'kubernetes-validate',
  file: 'validate',
  sources: join(root, 'deploy', 'validate'),
  what: "the checker of Kubernetes manifests against the Kubernetes API's types (deploy/validate)",
  needs: '1.26',
  fail,
});
printOrRun(binary, process.argv.slice(2), fail);
