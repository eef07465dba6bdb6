// `node scripts/release-versions.mjs VERSION`: checks that every version a release publishes is
// VERSION (`1.2.0` or `v1.2.0`, the tag): both packages, the service's (development) dependency on
// the client, package-lock.json, the chart's version and appVersion, the image tag the chart
// deploys by default, and the plain manifests rendered from the chart. `tollgate --version` reads
// package.json. CHANGELOG.md may date no version newer than VERSION, and in a checkout with its
// history, it dates only tagged versions (but the release commit's own, before its tag). It
// prints each fault and exits 1 on any, before the release workflow publishes anything.
import { spawnSync } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { pathToFileURL } from 'node:url';
import { parse } from 'yaml';
import { root } from './goBuild.mjs';
import { changelogSections, versionOf } from './release-notes.mjs';

const CHART = 'deploy/helm/tollgate/Chart.yaml';
const VALUES = 'deploy/helm/tollgate/values.yaml';
const MANIFESTS = 'deploy/kubernetes/tollgate.yaml';

/** The versions the plain manifests carry, each as [file, field, value]. */
function manifestFields(manifests) {
  const found = (field, pattern) => {
    const values = [...new Set([...manifests.matchAll(pattern)].map((match) => match[1]))];
    return (values.length > 0 ? values : [undefined]).map((value) => [MANIFESTS, field, value]);
  };
  return [
    ...found('the helm.sh/chart label', /^\s*helm\.sh\/chart: tollgate-(\S+)$/gm),
    ...found('the app.kubernetes.io/version label', /^\s*app\.kubernetes\.io\/version: "(.*)"$/gm),
    ...found('the image tag', /^\s*image: "[^"]*\/tollgate:([^"@]+)"$/gm),
  ];
}

/**
 * Each place under `dir` whose version is not VERSION, as "FILE: FIELD is X, not VERSION", then
 * CHANGELOG.md's faults; with `tags` (the repository's `v*` tags), its dates without a tag too.
 */
export function versionFaults(dir, tagOrVersion, tags) {
  const version = versionOf(tagOrVersion);
  const read = (file) => readFileSync(join(dir, file), 'utf8');
  const json = (file) => JSON.parse(read(file));
  const service = json('package.json');
  const client = json('packages/client/package.json');
  const lock = json('package-lock.json');
  const chart = parse(read(CHART));
  const image = parse(read(VALUES))?.image;
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
    // The templates deploy `image.tag | default .Chart.AppVersion`.
    [VALUES, 'image.tag (empty: appVersion)', image?.tag || chart?.appVersion],
    ...manifestFields(read(MANIFESTS)),
  ];
  const changelog = read('CHANGELOG.md');
  return [
    ...fields
      .filter(([, , value]) => String(value) !== version)
      .map(([file, field, value]) => `${file}: ${field} is ${value ?? 'missing'}, not ${version}`),
    ...changelogFaults(changelog, version).map((fault) => `CHANGELOG.md: ${fault}`),
    ...(tags ? untaggedReleases(changelog, tags) : []).map((fault) => `CHANGELOG.md: ${fault}`),
  ];
}

/** Negative, zero or positive as `a` precedes, equals or follows `b` in SemVer's order. */
function compareVersions(a, b) {
  const split = (version) => {
    const [core, pre] = version.replace(/\+.*$/, '').split(/-(.*)/);
    return { core: core.split('.').map(Number), pre };
  };
  const [x, y] = [split(a), split(b)];
  for (let i = 0; i < 3; i++) if (x.core[i] !== y.core[i]) return x.core[i] - y.core[i];
  if (x.pre === undefined || y.pre === undefined) return (x.pre ? -1 : 0) + (y.pre ? 1 : 0);
  return x.pre.localeCompare(y.pre, 'en', { numeric: true });
}

/**
 * CHANGELOG.md's faults against VERSION: it keeps an Unreleased section, and every other section
 * is a version dated YYYY-MM-DD, at most one each, none newer than VERSION. VERSION itself has a
 * dated section from its release commit on; before, its changes are under Unreleased.
 */
export function changelogFaults(changelog, version) {
  const sections = changelogSections(changelog);
  const faults = [];
  if (!sections.some((section) => section.name === 'Unreleased')) {
    faults.push('has no "## [Unreleased]" section');
  }
  const seen = new Set();
  for (const { name, date } of sections.filter((section) => section.name !== 'Unreleased')) {
    const heading = `"## [${name}]"`;
    try {
      versionOf(name);
    } catch {
      faults.push(`${heading} names no version`);
      continue;
    }
    if (seen.has(name)) faults.push(`${heading} appears twice`);
    seen.add(name);
    if (date === undefined) faults.push(`${heading} has no date: "## [${name}] - YYYY-MM-DD"`);
    if (compareVersions(name, version) > 0) faults.push(`${heading} is newer than ${version}`);
  }
  return faults;
}

/**
 * The dated versions that have no tag `vX`. Only the newest may lack one, while the Unreleased
 * section above it is empty: the release commit, before it is tagged. A dated version with work
 * listed above it was never released, and its section belongs under Unreleased.
 */
export function untaggedReleases(changelog, tags) {
  const sections = changelogSections(changelog);
  const unreleased = sections.find((section) => section.name === 'Unreleased');
  const dated = sections.filter((section) => section.name !== 'Unreleased' && section.date);
  return dated
    .filter((section) => !tags.includes(`v${section.name}`))
    .filter((section) => section !== dated[0] || Boolean(unreleased?.body))
    .map(
      ({ name, date }) =>
        `"## [${name}] - ${date}" has no tag v${name}: fold it into Unreleased, or tag its release`,
    );
}

/** The repository's `v*` tags, or undefined in a shallow checkout or outside git. */
function gitTags(dir) {
  const git = (...args) => spawnSync('git', ['-C', dir, ...args], { encoding: 'utf8' });
  if (git('rev-parse', '--is-shallow-repository').stdout?.trim() !== 'false') return undefined;
  const listed = git('tag', '--list', 'v*');
  return listed.status === 0 ? listed.stdout.split('\n').filter(Boolean) : undefined;
}

if (import.meta.url === pathToFileURL(process.argv[1] ?? '').href) {
  const [tagOrVersion, ...rest] = process.argv.slice(2);
  if (tagOrVersion === undefined || rest.length > 0) {
    console.error('usage: node scripts/release-versions.mjs VERSION');
    process.exit(2);
  }
  const tags = gitTags(root);
  let faults;
  try {
    faults = versionFaults(root, tagOrVersion, tags);
  } catch (error) {
    console.error(`release-versions: ${error.message}`);
    process.exit(1);
  }
  for (const fault of faults) console.error(`release-versions: ${fault}`);
  if (faults.length > 0) process.exit(1);
  const against = tags ? `, and CHANGELOG.md dates only tagged versions` : '';
  console.log(`release-versions: every version is ${versionOf(tagOrVersion)}${against}`);
}
