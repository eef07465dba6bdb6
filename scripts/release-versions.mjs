// `node scripts/release-versions.mjs VERSION`: checks that every version a release publishes is
// VERSION (`1.2.0` or `v1.2.0`, the tag): both packages, the service's (development) dependency on the client,
// package-lock.json, and the chart's version and appVersion. It prints each mismatch and exits 1
// on any, before the release workflow publishes anything.
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { pathToFileURL } from 'node:url';
import { parse } from 'yaml';
import { root } from './goBuild.mjs';
import { versionOf } from './release-notes.mjs';

const CHART = 'deploy/helm/tollgate/Chart.yaml';

/** Each place under `dir` whose version is not VERSION, as "FILE: FIELD is X, not VERSION". */
export function versionFaults(dir, tagOrVersion) {
  const version = versionOf(tagOrVersion);
  const json = (file) => JSON.parse(readFileSync(join(dir, file), 'utf8'));
  const service = json('package.json');
  const client = json('packages/client/package.json');
  const lock = json('package-lock.json');
  const chart = parse(readFileSync(join(dir, CHART), 'utf8'));
  const fields = [
    ['package.json', 'version', service.version],
    ['package.json', `devDependencies["${client.name}"]`, service.devDependencies?.[client.name]],
    ['packages/client/package.json', 'version', client.version],
    ['package-lock.json', 'version', lock.version],
    ['package-lock.json', 'packages[""].version', lock.packages?.['']?.version],
    [
      'package-lock.json',
      'packages["packages/client"].version',
      lock.packages?.['packages/client']?.version,
    ],
    [CHART, 'version', chart?.version],
    [CHART, 'appVersion', chart?.appVersion],
  ];
  return fields
    .filter(([, , value]) => String(value) !== version)
    .map(([file, field, value]) => `${file}: ${field} is ${value ?? 'missing'}, not ${version}`);
}

if (import.meta.url === pathToFileURL(process.argv[1] ?? '').href) {
  const [tagOrVersion, ...rest] = process.argv.slice(2);
  if (tagOrVersion === undefined || rest.length > 0) {
    console.error('usage: node scripts/release-versions.mjs VERSION');
    process.exit(2);
  }
  let faults;
  try {
    faults = versionFaults(root, tagOrVersion);
  } catch (error) {
    console.error(`release-versions: ${error.message}`);
    process.exit(1);
  }
  for (const fault of faults) console.error(`release-versions: ${fault}`);
  if (faults.length > 0) process.exit(1);
  console.log(`release-versions: every version is ${versionOf(tagOrVersion)}`);
}
