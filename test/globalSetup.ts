import { execFileSync } from 'node:child_process';

/** Tests that spawn the service as its own process run the built entry point, as `npm start` does. */
export default function setup(): void {
  execFileSync(process.execPath, ['node_modules/typescript/bin/tsc', '-p', 'tsconfig.build.json'], {
    stdio: 'inherit',
  });
}
