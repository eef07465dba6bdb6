// `node scripts/validate-envoy-gateway.mjs FILE.yaml...`: checks Envoy Gateway configurations (an
// EnvoyGateway, its ConfigMap, or gateway-helm values) with Envoy Gateway's own
// validation.ValidateEnvoyGateway, by the Go program in test/envoy-gateway/validate. Its output and
// exit code (0 valid, 1 invalid, 2 unreadable) pass through. The binary is built once per version
// of its sources into .cache/envoy-gateway-validate/<hash>/; `--print-binary` builds it and prints
// its path.
import { join } from 'node:path';
import { buildOnce, printOrRun, root } from './goBuild.mjs';

function fail(message) {
  console.error(`validate-envoy-gateway: ${message}`);
  process.exit(2);
}

const buildValidator = () =>
  buildOnce({
    name: 'envoy-gateway-validate',
    file: 'validate',
    sources: join(root, 'test', 'envoy-gateway', 'validate'),
    what: "the validator that checks Envoy Gateway configurations with Envoy Gateway's code",
    needs: '1.26',
    fail,
  });

printOrRun(buildValidator(), process.argv.slice(2), fail);
