import { readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { runFaults, usesFaults, workflowParts } from '../support/workflowCommands.js';

// The workflows in .github/workflows run this repository's npm scripts and scripts, and
// third-party actions: each npm command must name a script that exists, in the package it
// selects, each script path a file, and each action a commit SHA. actionlint checks the rest
// (test/integration/workflows.test.ts).

const WORKFLOWS = readdirSync('.github/workflows')
  .filter((name) => /\.ya?ml$/.test(name))
  .map((name) => join('.github/workflows', name));

describe('the workflows', () => {
  it('are CI and the release', () => {
    expect(WORKFLOWS.sort()).toEqual(['.github/workflows/ci.yml', '.github/workflows/release.yml']);
  });

  it.each(WORKFLOWS)('%s runs only npm scripts and scripts that exist', (path) => {
    const { runs } = workflowParts(readFileSync(path, 'utf8'));
    expect(runs.length).toBeGreaterThan(0);
    expect(runs.flatMap((run) => runFaults(run, '.'))).toEqual([]);
  });

  it.each(WORKFLOWS)('%s pins every action to a commit', (path) => {
    const text = readFileSync(path, 'utf8');
    const { uses } = workflowParts(text);
    expect(uses.length).toBeGreaterThan(0);
    expect(uses.flatMap((step) => usesFaults(step, text, '.'))).toEqual([]);
  });

  it('runs the steps of .ci/run in CI', () => {
    const { runs } = workflowParts(readFileSync('.github/workflows/ci.yml', 'utf8'));
    const steps = readFileSync('.ci/run', 'utf8')
      .split('\n')
      .filter((line) => /^(npm |node scripts\/)/.test(line));
    expect(steps).toContain('npm test');
    expect(steps).toContain('node scripts/release-dry-run.mjs');
    for (const step of steps) expect(runs).toContain(step);
    expect(runs.some((run) => run.includes('git status --porcelain'))).toBe(true);
  });
});

describe('the check of a workflow', () => {
  const broken = `
on: push
jobs:
  test:
    uses: ./.github/workflows/missing.yml
  build:
    runs-on: ubuntu-24.04
    steps:
      - uses: actions/checkout@v6
      - uses: actions/setup-node@0123456789abcdef0123456789abcdef01234567
      - run: npm run no-such-script -- --quick
      - run: npm ci && npm test --workspace @tollgate/client
      - run: npm run build --workspace=@tollgate/nothing
      - run: node scripts/no-such-script.mjs | tee out.log
      - run: .ci/missing
`;

  it('finds each missing script, workspace and path', () => {
    const { runs } = workflowParts(broken);
    expect(runs.flatMap((run) => runFaults(run, '.'))).toEqual([
      'npm run no-such-script -- --quick: package.json has no script "no-such-script"',
      'npm test --workspace @tollgate/client: packages/client/package.json has no script "test"',
      'npm run build --workspace=@tollgate/nothing: no workspace @tollgate/nothing',
      'scripts/no-such-script.mjs: no such file',
      '.ci/missing: no such file',
    ]);
  });

  it('finds a missing local workflow and each action not pinned with its tag', () => {
    const { uses } = workflowParts(broken);
    expect(uses.flatMap((step) => usesFaults(step, broken, '.'))).toEqual([
      './.github/workflows/missing.yml: no such file',
      'actions/checkout@v6: not pinned to a commit SHA with its tag in a comment',
      'actions/setup-node@0123456789abcdef0123456789abcdef01234567: not pinned to a commit SHA with its tag in a comment',
    ]);
  });

  it('accepts what exists', () => {
    const run = 'npm ci\nnpm run build --workspace @tollgate/client\nnode scripts/helm.mjs lint';
    expect(runFaults(run, '.')).toEqual([]);
    const pinned = 'uses: actions/checkout@3d3c42e5aac5ba805825da76410c181273ba90b1 # v7.0.1';
    expect(usesFaults(pinned.slice('uses: '.length, -' # v7.0.1'.length), pinned, '.')).toEqual([]);
  });
});
