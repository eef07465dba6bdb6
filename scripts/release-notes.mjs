// `node scripts/release-notes.mjs VERSION`: prints CHANGELOG.md's section for VERSION (`1.2.0` or
// `v1.2.0`), without its heading: the notes of the GitHub release that the release workflow
// creates for the tag. It exits 1, saying what to add, when the section is missing or empty.
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { pathToFileURL } from 'node:url';
import { root } from './goBuild.mjs';

const SEMVER = /^(0|[1-9]\d*)\.(0|[1-9]\d*)\.(0|[1-9]\d*)(-[0-9A-Za-z.-]+)?(\+[0-9A-Za-z.-]+)?$/;

/** `v1.2.0` or `1.2.0` as `1.2.0`; anything that is not a semantic version throws. */
export function versionOf(tagOrVersion) {
  const version = String(tagOrVersion).replace(/^v/, '');
  if (!SEMVER.test(version)) {
    throw new Error(`"${tagOrVersion}" is not a version such as 1.2.0 or v1.2.0`);
  }
  return version;
}

/**
 * The `## [NAME]` sections of a Keep a Changelog file, in order: each one's name (`Unreleased`
 * or a version), its date when the heading ends ` - YYYY-MM-DD`, and its body, trimmed, up to the
 * next `## ` heading or the link definitions at the end.
 */
export function changelogSections(changelog) {
  const sections = [];
  let current;
  for (const line of changelog.split(/\r?\n/)) {
    const heading = /^## \[([^\]]+)\](.*)$/.exec(line);
    if (heading) {
      const date = /^ - (\d{4}-\d{2}-\d{2})\s*$/.exec(heading[2])?.[1];
      current = { name: heading[1], date, lines: [] };
      sections.push(current);
    } else if (line.startsWith('## ') || /^\[[^\]]+\]:\s/.test(line)) {
      current = undefined;
    } else {
      current?.lines.push(line);
    }
  }
  return sections.map(({ name, date, lines }) => ({ name, date, body: lines.join('\n').trim() }));
}

/** The body of the `## [VERSION]` section of a Keep a Changelog file (a date may follow). */
export function releaseNotes(changelog, tagOrVersion) {
  const version = versionOf(tagOrVersion);
  const found = changelogSections(changelog).filter((section) => section.name === version);
  if (found.length === 0) {
    throw new Error(
      `CHANGELOG.md has no section for ${version}: rename its Unreleased heading to ` +
        `"## [${version}] - YYYY-MM-DD" (the release's date), and start a new Unreleased above it`,
    );
  }
  if (found.length > 1) throw new Error(`CHANGELOG.md has ${found.length} sections for ${version}`);
  if (found[0].body === '') throw new Error(`CHANGELOG.md's section for ${version} is empty`);
  return found[0].body;
}

/**
 * CHANGELOG.md as a release commit has it (docs/releasing.md): the Unreleased heading renamed
 * `## [VERSION] - DATE`, below a new, empty Unreleased section.
 */
export function releaseChangelog(changelog, tagOrVersion, date) {
  const version = versionOf(tagOrVersion);
  const unreleased = /^## \[Unreleased\][ \t]*$/m;
  if (!unreleased.test(changelog)) throw new Error('CHANGELOG.md has no "## [Unreleased]" section');
  return changelog.replace(unreleased, `## [Unreleased]\n\n## [${version}] - ${date}`);
}

if (import.meta.url === pathToFileURL(process.argv[1] ?? '').href) {
  const [tagOrVersion, ...rest] = process.argv.slice(2);
  if (tagOrVersion === undefined || rest.length > 0) {
    console.error('usage: node scripts/release-notes.mjs VERSION');
    process.exit(2);
  }
  try {
    console.log(releaseNotes(readFileSync(join(root, 'CHANGELOG.md'), 'utf8'), tagOrVersion));
  } catch (error) {
    console.error(`release-notes: ${error.message}`);
    process.exit(1);
  }
}
