// `npm run validate:envoy [FILE.yaml...]`: checks Envoy bootstrap files (by default the samples
// envoy/envoy.yaml, envoy-local.yaml, envoy-rlqs.yaml and envoy-token-budget.yaml) against Envoy's own v3 API, with the Go
// validator in envoy/validate. Its output and exit code (0 valid, 1 invalid, 2 unreadable) pass
// through. The binary is built once per version of its sources into .cache/envoy-validate/<hash>/;
// `--print-binary` builds it and prints its path.
import { spawnSync } from 'node:child_process';
import { join, relative } from 'node:path';
import { buildOnce, root } from './goBuild.mjs';

function fail(message) {
  console.error(`validate-envoy: ${message}`);
  process.exit(2);
}

const buildValidator = () =>
  buildOnce({
    name: 'envoy-validate',
    file: 'validate',
    sources: join(root, 'envoy', 'validate'),
    what: "the validator that checks Envoy bootstraps against Envoy's API",
    needs: '1.26',
    fail,
  });

// The bootstraps in envoy/; its other YAML files are tollgate's rules.
const SAMPLES = ['envoy.yaml', 'envoy-local.yaml', 'envoy-rlqs.yaml', 'envoy-token-budget.yaml'];

const args = process.argv.slice(2);
const binary = buildValidator();
if (args[0] === '--print-binary') {
  console.log(binary);
} else {
  const files =
    args.length > 0
      ? args
      : SAMPLES.map((sample) => relative(process.cwd(), join(root, 'envoy', sample)));
  const run = spawnSync(binary, files, { stdio: 'inherit' });
  if (run.error) fail(run.error.message);
  process.exit(run.status ?? 1);
}
