import { mkdirSync, mkdtempSync, renameSync, rmSync, utimesSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it, vi } from 'vitest';
import { RulesError } from '../../src/core/errors.js';
import { loadRules } from '../../src/rules/loadRules.js';
import { matchRule } from '../../src/rules/match.js';
import type { RuleSet } from '../../src/rules/types.js';
import {
  watchRules,
  type RulesWatcher,
  type WatchRulesOptions,
} from '../../src/rules/watchRules.js';
import { publishConfigMap } from '../support/configMap.js';

// Real files in a temp dir and real timers. Tests of the watcher poll only once a minute, so a
// reload within the wait can only come from fs.watch.

const rulesYaml = (domain: string, requestsPerUnit: number | string): string => `
domain: ${domain}
descriptors:
  - key: tenant
    rate_limit: {unit: minute, requests_per_unit: ${requestsPerUnit}}
`;

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));
const waitFor = (assertion: () => void) => vi.waitFor(assertion, { timeout: 3_000, interval: 20 });

/** The limit a request for any tenant gets in `domain`, or undefined without one. */
function limitIn(rules: RuleSet | undefined, domain: string): number | undefined {
  const domainRules = rules?.domains.get(domain);
  if (domainRules === undefined) return undefined;
  return matchRule(domainRules, [{ key: 'tenant', value: 'acme' }])?.limit?.requestsPerUnit;
}

let root: string;
const watchers: RulesWatcher[] = [];
beforeEach(() => {
  root = mkdtempSync(join(tmpdir(), 'tollgate-reload-'));
});
afterEach(() => {
  for (const watcher of watchers.splice(0)) watcher.close();
  rmSync(root, { recursive: true, force: true });
});

function start(path: string, options: Partial<WatchRulesOptions> = {}) {
  const seen = { reloads: [] as RuleSet[], errors: [] as unknown[], loads: 0 };
  watchers.push(
    watchRules({
      path,
      load: async () => {
        seen.loads++;
        return loadRules(path, { defaultAlgorithm: 'sliding_window' });
      },
      onReload: (rules) => seen.reloads.push(rules),
      onError: (error) => seen.errors.push(error),
      pollIntervalMs: 60_000,
      ...options,
    }),
  );
  return seen;
}

/** A directory of rules files, `rules/` under the temp dir. */
function rulesDir(files: Record<string, string>): string {
  const dir = join(root, 'rules');
  mkdirSync(dir);
  for (const [name, text] of Object.entries(files)) writeFileSync(join(dir, name), text);
  return dir;
}

describe('watchRules', () => {
  it('reloads a rules file edited in place', async () => {
    const file = join(root, 'rules.yaml');
    writeFileSync(file, rulesYaml('api', 10));
    const seen = start(file);

    writeFileSync(file, rulesYaml('api', 20));
    await waitFor(() => expect(limitIn(seen.reloads.at(-1), 'api')).toBe(20));
    expect(seen.errors).toEqual([]);
  });

  it('adds the domain of a new file in the directory, and drops that of a removed one', async () => {
    const dir = rulesDir({ 'api.yaml': rulesYaml('api', 10) });
    const seen = start(dir);

    writeFileSync(join(dir, 'billing.yml'), rulesYaml('billing', 5));
    await waitFor(() => expect(limitIn(seen.reloads.at(-1), 'billing')).toBe(5));
    expect(limitIn(seen.reloads.at(-1), 'api')).toBe(10);

    rmSync(join(dir, 'api.yaml'));
    await waitFor(() => expect([...seen.reloads.at(-1)!.domains.keys()]).toEqual(['billing']));
  });

  it.each(['the mounted directory', 'a file in it'])(
    'follows a ConfigMap ..data symlink swap, watching %s',
    async (target) => {
      const dir = join(root, 'configmap');
      mkdirSync(dir);
      publishConfigMap(dir, { 'rules.yaml': rulesYaml('api', 10) });
      const seen = start(target === 'a file in it' ? join(dir, 'rules.yaml') : dir);

      publishConfigMap(dir, { 'rules.yaml': rulesYaml('api', 30) });
      await waitFor(() => expect(limitIn(seen.reloads.at(-1), 'api')).toBe(30));
      expect(seen.errors).toEqual([]);
    },
  );

  it('reports a broken file without reloading, then reloads once it is fixed', async () => {
    const dir = rulesDir({ 'api.yaml': rulesYaml('api', 10) });
    const seen = start(dir);

    writeFileSync(join(dir, 'api.yaml'), rulesYaml('api', 'lots'));
    await waitFor(() => expect(seen.errors).not.toEqual([]));
    expect(seen.errors.at(-1)).toBeInstanceOf(RulesError);
    expect((seen.errors.at(-1) as Error).message).toMatch(
      /^api\.yaml: descriptors\[0\]\.rate_limit\.requests_per_unit: /,
    );
    expect(seen.reloads).toEqual([]);

    writeFileSync(join(dir, 'api.yaml'), rulesYaml('api', 40));
    await waitFor(() => expect(limitIn(seen.reloads.at(-1), 'api')).toBe(40));
  });

  it('picks up an edit by polling alone', async () => {
    const file = join(root, 'rules.yaml');
    writeFileSync(file, rulesYaml('api', 10));
    const seen = start(file, { watch: false, pollIntervalMs: 100 });

    writeFileSync(file, rulesYaml('api', 50));
    await waitFor(() => expect(limitIn(seen.reloads.at(-1), 'api')).toBe(50));
  });

  it('does not reload a file touched or rewritten with the same content', async () => {
    const dir = rulesDir({ 'api.yaml': rulesYaml('api', 10) });
    const seen = start(dir, { pollIntervalMs: 50 });

    const later = new Date(Date.now() + 60_000);
    utimesSync(join(dir, 'api.yaml'), later, later);
    writeFileSync(join(dir, '.api.yaml.tmp'), rulesYaml('api', 10));
    renameSync(join(dir, '.api.yaml.tmp'), join(dir, 'api.yaml'));
    await sleep(500);
    expect(seen.loads).toBe(0);

    writeFileSync(join(dir, 'api.yaml'), rulesYaml('api', 60));
    await waitFor(() => expect(limitIn(seen.reloads.at(-1), 'api')).toBe(60));
    expect(seen.loads).toBe(1);
  });

  it('keeps going when the directory is removed and created again', async () => {
    const dir = rulesDir({ 'api.yaml': rulesYaml('api', 10) });
    const seen = start(dir, { pollIntervalMs: 200 });

    rmSync(dir, { recursive: true });
    await waitFor(() => expect(seen.errors).not.toEqual([]));
    expect((seen.errors.at(-1) as Error).message).toMatch(/^cannot read rules: /);

    mkdirSync(dir);
    writeFileSync(join(dir, 'api.yaml'), rulesYaml('api', 70));
    await waitFor(() => expect(limitIn(seen.reloads.at(-1), 'api')).toBe(70));
  });

  it('calls nothing after close()', async () => {
    const file = join(root, 'rules.yaml');
    writeFileSync(file, rulesYaml('api', 10));
    const seen = start(file, { pollIntervalMs: 50 });

    writeFileSync(file, rulesYaml('api', 80));
    watchers.at(-1)!.close();
    writeFileSync(file, rulesYaml('api', 'lots'));
    await sleep(500);
    expect(seen).toEqual({ reloads: [], errors: [], loads: 0 });
  });
});
