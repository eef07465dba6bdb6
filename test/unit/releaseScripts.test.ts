import { spawnSync } from 'node:child_process';
import { cpSync, mkdtempSync, mkdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
// @ts-expect-error: a plain .mjs script, run by the release workflow
import { releaseNotes } from '../../scripts/release-notes.mjs';
// @ts-expect-error: a plain .mjs script, run by the release workflow
import { versionFaults } from '../../scripts/release-versions.mjs';

// The release workflow's notes come from CHANGELOG.md's section for the tag, and it publishes
// nothing unless every version in the repository is the tag's.

const notes = releaseNotes as (changelog: string, version: string) => string;
const faults = versionFaults as (dir: string, version: string) => string[];

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

  it("prints this repository's section for a released version, and exits 1 for an unknown one", () => {
    const released = script('release-notes.mjs', 'v0.2.0');
    expect(released.status).toBe(0);
    expect(released.stdout).toMatch(/^### Added\n\n- `@tollgate\/client`/);
    expect(released.stdout).not.toContain('## [0.1.0]');
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
      const json = readFileSync(file, 'utf8').replaceAll('"0.2.0"', `"${version}"`);
      writeFileSync(join(copy, file), json);
    }
    cpSync('deploy/helm/tollgate/Chart.yaml', join(copy, 'deploy/helm/tollgate/Chart.yaml'));
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
    expect(faults(copy, '1.5.0')).toHaveLength(8);
  });
});
