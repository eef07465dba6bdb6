import { execFileSync } from 'node:child_process';

/**
 * Tests that spawn the service as its own process run the built entry point, as `npm start` does;
 * the service and the tests import @tollgate/client's build through its link in node_modules.
 */
export default function setup(): void {
  execFileSync(process.execPath, ['scripts/build.mjs'], { stdio: 'inherit' });
}
