import { spawnSync } from 'node:child_process';
import { mkdtempSync, readdirSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';

// The GitHub Actions workflows, checked with actionlint (installed from its Go module into
// .cache/ once by scripts/actionlint.mjs): syntax, expressions and their contexts, job needs,
// permissions, action inputs, and the `run:` scripts through shellcheck where it is on PATH.

let actionlint: string;
const dir = mkdtempSync(join(tmpdir(), 'tollgate-workflows-'));

beforeAll(() => {
  // The first run fetches and builds actionlint with Go (under a minute); later runs reuse it.
  const install = spawnSync(process.execPath, ['scripts/actionlint.mjs', '--print-binary'], {
    encoding: 'utf8',
  });
  expect(install, install.stderr).toMatchObject({ status: 0 });
  actionlint = install.stdout.trim();
}, 600_000);

afterAll(() => rmSync(dir, { recursive: true, force: true }));

describe('actionlint', () => {
  it('finds nothing wrong in .github/workflows', () => {
    const files = readdirSync('.github/workflows').map((name) => join('.github/workflows', name));
    expect(files.length).toBeGreaterThan(0);
    const lint = spawnSync(actionlint, ['-no-color', ...files], { encoding: 'utf8' });
    expect(lint.stdout + lint.stderr).toBe('');
    expect(lint.status).toBe(0);
  });

  it('fails on a workflow with an unknown job in needs and an undefined step output', () => {
    const broken = join(dir, 'broken.yml');
    writeFileSync(
      broken,
      [
        'on: push',
        'permissions:',
        '  contents: read',
        'jobs:',
        '  publish:',
        '    needs: [tests]',
        '    runs-on: ubuntu-24.04',
        '    steps:',
        '      - run: echo "${{ steps.build.outputs.digest }}"',
        '',
      ].join('\n'),
    );
    const lint = spawnSync(actionlint, ['-no-color', broken], { encoding: 'utf8' });
    expect(lint.status).toBe(1);
    expect(lint.stdout).toContain('broken.yml');
    expect(lint.stdout).toMatch(/job "publish" needs job "tests" which does not exist/);
    expect(lint.stdout).toMatch(/property "build" is not defined/);
  });
});
