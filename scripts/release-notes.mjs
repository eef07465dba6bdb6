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
 * The body of the `## [VERSION]` section of a Keep a Changelog file (a date may follow the
 * heading), up to the next `## ` heading or the link definitions at the end, trimmed.
 */
export function releaseNotes(changelog, tagOrVersion) {
  const version = versionOf(tagOrVersion);
  const lines = changelog.split(/\r?\n/);
  const heading = (line) => /^## \[([^\]]+)\]/.exec(line)?.[1];
  const starts = lines.flatMap((line, index) => (heading(line) === version ? [index] : []));
  if (starts.length === 0) {
    throw new Error(
      `CHANGELOG.md has no section for ${version}: rename its Unreleased heading to ` +
        `"## [${version}] - YYYY-MM-DD" (the release's date), and start a new Unreleased above it`,
    );
  }
  if (starts.length > 1)
    throw new Error(`CHANGELOG.md has ${starts.length} sections for ${version}`);
  const body = [];
  for (const line of lines.slice(starts[0] + 1)) {
    if (line.startsWith('## ') || /^\[[^\]]+\]:\s/.test(line)) break;
    body.push(line);
  }
  const notes = body.join('\n').trim();
  if (notes === '') throw new Error(`CHANGELOG.md's section for ${version} is empty`);
  return notes;
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
