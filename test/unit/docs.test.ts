// README and docs/ link to each other and into the repository: every relative link must reach a
// file that exists, and every #anchor a heading of its page, as GitHub spells heading anchors.
import { existsSync, readdirSync, readFileSync } from 'node:fs';
import { dirname, join, normalize } from 'node:path';
import { describe, expect, it } from 'vitest';

const PAGES = [
  'README.md',
  'CHANGELOG.md',
  'SECURITY.md',
  ...readdirSync('docs')
    .filter((name) => name.endsWith('.md'))
    .map((name) => join('docs', name)),
  ...['packages/client/README.md'].filter((path) => existsSync(path)),
];

/** The text outside fenced code blocks, where links and headings live. */
function prose(markdown: string): string {
  return markdown.replace(/^```[^]*?^```/gm, '');
}

/** GitHub's anchor for a heading: lower case, punctuation dropped, spaces to hyphens. */
function anchorOf(heading: string): string {
  return heading
    .trim()
    .toLowerCase()
    .replace(/[^\p{L}\p{N}\- _]/gu, '')
    .replace(/ /g, '-');
}

function anchors(path: string): Set<string> {
  const seen = new Map<string, number>();
  const result = new Set<string>();
  for (const [, heading] of prose(readFileSync(path, 'utf8')).matchAll(/^#{1,6} (.+)$/gm)) {
    const base = anchorOf(heading!);
    const count = seen.get(base) ?? 0;
    seen.set(base, count + 1);
    result.add(count === 0 ? base : `${base}-${count}`);
  }
  return result;
}

describe('documentation links', () => {
  it('spells anchors as GitHub does', () => {
    expect(anchorOf('Migrating from envoyproxy/ratelimit')).toBe(
      'migrating-from-envoyproxyratelimit',
    );
    expect(anchorOf('The `tollgate` command')).toBe('the-tollgate-command');
    expect(anchorOf('Bounds, containment and honest health')).toBe(
      'bounds-containment-and-honest-health',
    );
  });

  it.each(PAGES)('%s links only to files and headings that exist', (page) => {
    const broken: string[] = [];
    for (const [, target] of prose(readFileSync(page, 'utf8')).matchAll(/\]\(([^)\s]+)\)/g)) {
      if (/^[a-z]+:/.test(target!)) continue;
      const [file, anchor] = target!.split('#') as [string, string | undefined];
      const path = file === '' ? page : normalize(join(dirname(page), file));
      if (!existsSync(path)) {
        broken.push(`${target}: no file ${path}`);
      } else if (anchor !== undefined && !anchors(path).has(anchor)) {
        broken.push(`${target}: no heading #${anchor} in ${path}`);
      }
    }
    expect(broken).toEqual([]);
  });
});
