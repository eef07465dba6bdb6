import { spawnSync } from 'node:child_process';
import { cpSync, mkdtempSync, mkdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
// @ts-expect-error: a plain .mjs script, run by the release workflow
import { releaseChangelog, releaseNotes } from '../../scripts/release-notes.mjs';
// @ts-expect-error: a plain .mjs script, run by the release workflow
import * as versions from '../../scripts/release-versions.mjs';

// The release workflow's notes come from CHANGELOG.md's section for the tag, and it publishes
// nothing unless every version in the repository is the tag's.

const notes = releaseNotes as (changelog: string, version: string) => string;
const released = releaseChangelog as (changelog: string, version: string, date: string) => string;
const { versionFaults, changelogFaults, untaggedReleases } = versions as {
  versionFaults: (dir: string, version: string) => string[];
  changelogFaults: (changelog: string, version: string) => string[];
  untaggedReleases: (changelog: string, tags: string[]) => string[];
};
const faults = versionFaults;
const PACKAGE_VERSION = (JSON.parse(readFileSync('package.json', 'utf8')) as { version: string })
  .version;

const CHANGELOG = `# Changelog

## [Unreleased]

- Not released yet.

## [1.1.0] - 2027-01-02

### Added

- A feature.

## [1.0.0] - 2027-01-01

- The first release.

[1.1.0]: https://example.com/compare/v1.0.0...v1.1.0
`;

function script(name: string, ...args: string[]) {
  return spawnSync(process.execPath, [join('scripts', name), ...args], { encoding: 'utf8' });
}

describe('scripts/release-notes.mjs', () => {
  it("prints a version's section without its heading, up to the next one", () => {
    expect(notes(CHANGELOG, 'v1.1.0')).toBe('### Added\n\n- A feature.');
    expect(notes(CHANGELOG, '1.0.0')).toBe('- The first release.');
  });

  it('fails, saying what to add, for a missing, empty or malformed version', () => {
    expect(() => notes(CHANGELOG, '2.0.0')).toThrow(
      'CHANGELOG.md has no section for 2.0.0: rename its Unreleased heading to "## [2.0.0] - YYYY-MM-DD"',
    );
    expect(() => notes('## [2.0.0]\n\n## [1.0.0]\n- x', '2.0.0')).toThrow(
      "CHANGELOG.md's section for 2.0.0 is empty",
    );
    expect(() => notes(CHANGELOG, 'Unreleased')).toThrow('"Unreleased" is not a version');
  });

  it("prints this repository's notes once a release commit dates its Unreleased section", () => {
    const changelog = released(readFileSync('CHANGELOG.md', 'utf8'), PACKAGE_VERSION, '2027-01-01');
    expect(changelog).toContain(`## [Unreleased]\n\n## [${PACKAGE_VERSION}] - 2027-01-01\n`);
    expect(notes(changelog, PACKAGE_VERSION)).toMatch(/^[^#][^]*\n### Added\n/);
    expect(() => released('# Changelog\n', '1.0.0', '2027-01-01')).toThrow(
      'CHANGELOG.md has no "## [Unreleased]" section',
    );
    const missing = script('release-notes.mjs', 'v99.0.0');
    expect(missing.status).toBe(1);
    expect(missing.stdout).toBe('');
    expect(missing.stderr).toContain('release-notes: CHANGELOG.md has no section for 99.0.0');
  });
});

describe('scripts/release-versions.mjs', () => {
  const dir = mkdtempSync(join(tmpdir(), 'tollgate-release-'));
  afterAll(() => rmSync(dir, { recursive: true, force: true }));

  /** A copy of the files it reads, with every version set to VERSION. */
  function repository(version: string): string {
    const copy = mkdtempSync(join(dir, 'repo-'));
    for (const file of ['package.json', 'packages/client/package.json', 'package-lock.json']) {
      mkdirSync(join(copy, file, '..'), { recursive: true });
      const json = readFileSync(file, 'utf8').replaceAll(`"${PACKAGE_VERSION}"`, `"${version}"`);
      writeFileSync(join(copy, file), json);
    }
    cpSync('deploy/helm/tollgate', join(copy, 'deploy/helm/tollgate'), { recursive: true });
    mkdirSync(join(copy, 'deploy/kubernetes'), { recursive: true });
    const manifests = readFileSync('deploy/kubernetes/tollgate.yaml', 'utf8')
      .replaceAll(`tollgate-${PACKAGE_VERSION}`, `tollgate-${version}`)
      .replaceAll(`"${PACKAGE_VERSION}"`, `"${version}"`)
      .replaceAll(`tollgate:${PACKAGE_VERSION}"`, `tollgate:${version}"`);
    writeFileSync(join(copy, 'deploy/kubernetes/tollgate.yaml'), manifests);
    writeFileSync(join(copy, 'CHANGELOG.md'), CHANGELOG);
    const chart = join(copy, 'deploy/helm/tollgate/Chart.yaml');
    writeFileSync(
      chart,
      readFileSync(chart, 'utf8')
        .replace(/^version: .*$/m, `version: ${version}`)
        .replace(/^appVersion: .*$/m, `appVersion: '${version}'`),
    );
    return copy;
  }

  it('accepts a repository whose every version is the tag', () => {
    expect(faults(repository('1.4.0'), 'v1.4.0')).toEqual([]);
  });

  it('names each file and field that differs from the tag', () => {
    const copy = repository('1.4.0');
    const chart = join(copy, 'deploy/helm/tollgate/Chart.yaml');
    writeFileSync(chart, readFileSync(chart, 'utf8').replace(/^version: .*$/m, 'version: 0.9.0'));
    expect(faults(copy, '1.4.0')).toEqual([
      'deploy/helm/tollgate/Chart.yaml: version is 0.9.0, not 1.4.0',
    ]);
    expect(faults(copy, '1.5.0')).toHaveLength(12);
  });

  it('reads the image tag the chart deploys by default, and the rendered manifests', () => {
    const copy = repository('1.4.0');
    const values = join(copy, 'deploy/helm/tollgate/values.yaml');
    writeFileSync(values, readFileSync(values, 'utf8').replace("tag: ''", "tag: '1.3.0'"));
    const manifests = join(copy, 'deploy/kubernetes/tollgate.yaml');
    writeFileSync(
      manifests,
      readFileSync(manifests, 'utf8').replace('tollgate:1.4.0"', 'tollgate:1.3.0"'),
    );
    expect(faults(copy, '1.4.0')).toEqual([
      'deploy/helm/tollgate/values.yaml: image.tag (empty: appVersion) is 1.3.0, not 1.4.0',
      'deploy/kubernetes/tollgate.yaml: the image tag is 1.3.0, not 1.4.0',
    ]);
  });

  it('refuses a changelog that dates a version past the tag, or leaves one undated', () => {
    expect(changelogFaults(CHANGELOG, '1.1.0')).toEqual([]);
    expect(changelogFaults(CHANGELOG, '1.2.0')).toEqual([]);
    expect(changelogFaults(CHANGELOG, '1.1.0-rc.1')).toEqual([
      '"## [1.1.0]" is newer than 1.1.0-rc.1',
    ]);
    const undated = CHANGELOG.replace('## [1.1.0] - 2027-01-02', '## [1.1.0] - Unreleased');
    expect(changelogFaults(undated, '1.1.0')).toEqual([
      '"## [1.1.0]" has no date: "## [1.1.0] - YYYY-MM-DD"',
    ]);
    expect(changelogFaults(CHANGELOG.replace('## [Unreleased]', '## [next]'), '1.1.0')).toEqual([
      'has no "## [Unreleased]" section',
      '"## [next]" names no version',
    ]);
  });

  it('refuses a dated version without its tag, but the release commit before it is tagged', () => {
    expect(untaggedReleases(CHANGELOG, ['v1.0.0', 'v1.1.0'])).toEqual([]);
    expect(untaggedReleases(CHANGELOG, ['v1.0.0'])).toEqual([
      '"## [1.1.0] - 2027-01-02" has no tag v1.1.0: fold it into Unreleased, or tag its release',
    ]);
    const releaseCommit = CHANGELOG.replace('- Not released yet.\n', '');
    expect(untaggedReleases(releaseCommit, ['v1.0.0'])).toEqual([]);
    expect(untaggedReleases(releaseCommit, [])).toEqual([
      '"## [1.0.0] - 2027-01-01" has no tag v1.0.0: fold it into Unreleased, or tag its release',
    ]);
  });

  it("passes on this repository for package.json's version", () => {
    const checked = script('release-versions.mjs', PACKAGE_VERSION);
    expect(checked.stderr).toBe('');
    expect(checked.status).toBe(0);
    expect(checked.stdout).toContain(`release-versions: every version is ${PACKAGE_VERSION}`);
  });
});
