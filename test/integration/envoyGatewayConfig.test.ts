import { spawn } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { parseAllDocuments } from 'yaml';

// The YAML of docs/envoy-gateway.md, checked by Envoy Gateway v1.9.1's own code: its EnvoyGateway
// configurations (the ConfigMap, the Helm values) by validation.ValidateEnvoyGateway, through the
// Go program in test/envoy-gateway/validate; its policies by `egctl x validate`, installed at
// v1.9.1. egctl exits 0 on invalid input, so its output is read: `OK` alone, or each failing
// document followed by its `local validation error`. Each broken copy is made from the page's own
// block by one substitution, which must find its text.

const PAGE = 'docs/envoy-gateway.md';

interface Run {
  code: number | null;
  stdout: string;
  stderr: string;
}

function run(script: string, args: string[]): Promise<Run> {
  return new Promise((resolve) => {
    const child = spawn(process.execPath, [script, ...args]);
    let stdout = '';
    let stderr = '';
    child.stdout.on('data', (chunk: Buffer) => (stdout += chunk.toString()));
    child.stderr.on('data', (chunk: Buffer) => (stderr += chunk.toString()));
    child.once('close', (code) => resolve({ code, stdout, stderr }));
  });
}

type Checker = 'ValidateEnvoyGateway' | 'egctl';

/** The page's YAML blocks, each with the check that reads its kind. */
function blocks(): { yaml: string; checker: Checker; what: string }[] {
  const page = readFileSync(PAGE, 'utf8');
  return [...page.matchAll(/^```yaml\n([^]*?)^```/gm)].map(([, yaml]) => {
    const docs = parseAllDocuments(yaml!).map(
      (doc) => doc.toJS() as { kind?: string; config?: { envoyGateway?: unknown } },
    );
    const kinds = docs.map((doc) => doc.kind ?? (doc.config?.envoyGateway ? 'Helm values' : '?'));
    const what = kinds.join(', ');
    if (kinds.every((kind) => kind === 'ConfigMap' || kind === 'Helm values')) {
      return { yaml: yaml!, checker: 'ValidateEnvoyGateway', what };
    }
    if (kinds.every((kind) => kind === 'BackendTrafficPolicy')) {
      return { yaml: yaml!, checker: 'egctl', what };
    }
    throw new Error(`${PAGE} has a YAML block that nothing here checks: ${what}`);
  });
}

/** The block with `find` replaced by `replacement`, which must change it. */
function broken(yaml: string, find: string | RegExp, replacement: string): string {
  const changed = yaml.replace(find, replacement);
  expect(changed, `the block no longer has ${String(find)}`).not.toBe(yaml);
  return changed;
}

/** What `egctl x validate` said: valid (`OK` alone), or the errors it gave, in order. */
function egctlVerdict(stdout: string): { valid: boolean; errors: string[] } {
  // Its colours are ANSI escapes: ESC, then [32m and the like.
  const plain = stdout.replaceAll(String.fromCharCode(27), '').replaceAll(/\[[0-9;]*m/g, '');
  if (plain.trim() === 'OK') return { valid: true, errors: [] };
  const errors = [...plain.matchAll(/^local validation error: (.*)$/gm)].map(([, error]) => error!);
  expect(errors, `egctl said neither OK nor an error:\n${plain}`).not.toEqual([]);
  return { valid: false, errors };
}

let dir: string;

beforeAll(async () => {
  dir = mkdtempSync(join(tmpdir(), 'tollgate-eg-docs-'));
  // The first builds fetch Envoy Gateway's modules and compile them: egctl takes minutes.
  for (const script of ['scripts/validate-envoy-gateway.mjs', 'scripts/egctl.mjs']) {
    const build = await run(script, ['--print-binary']);
    expect(build, build.stderr).toMatchObject({ code: 0 });
  }
}, 1_200_000);

afterAll(() => rmSync(dir, { recursive: true, force: true }));

function write(name: string, yaml: string): string {
  const file = join(dir, `${name.replaceAll(/\W+/g, '-')}.yaml`);
  writeFileSync(file, yaml);
  return file;
}

const validateEnvoyGateway = (file: string) => run('scripts/validate-envoy-gateway.mjs', [file]);
const egctl = (file: string) => run('scripts/egctl.mjs', ['x', 'validate', '-f', file]);

describe(`${PAGE}'s YAML, checked by Envoy Gateway v1.9.1`, () => {
  it('holds the ConfigMap, the Helm values and a policy, each of a kind checked here', () => {
    expect(blocks().map(({ what, checker }) => [what, checker])).toEqual([
      ['ConfigMap', 'ValidateEnvoyGateway'],
      ['Helm values', 'ValidateEnvoyGateway'],
      ['BackendTrafficPolicy', 'egctl'],
    ]);
  });

  it('passes ValidateEnvoyGateway, configurations and Helm values alike', async () => {
    for (const [i, { yaml }] of blocks()
      .filter(({ checker }) => checker === 'ValidateEnvoyGateway')
      .entries()) {
      const file = write(`config-${i}`, yaml);
      expect(await validateEnvoyGateway(file)).toEqual({
        code: 0,
        stdout: `OK: ${file}\n`,
        stderr: '',
      });
    }
  });

  it('passes egctl x validate', async () => {
    for (const [i, { yaml }] of blocks()
      .filter(({ checker }) => checker === 'egctl')
      .entries()) {
      const { code, stdout } = await egctl(write(`policy-${i}`, yaml));
      expect(code).toBe(0);
      expect(egctlVerdict(stdout)).toEqual({ valid: true, errors: [] });
    }
  });

  const configs = () => blocks().filter(({ checker }) => checker === 'ValidateEnvoyGateway');

  it.each([
    {
      // Envoy Gateway drops an unknown field without a word: the validator reads strictly.
      fault: 'a misspelt rateLimitDeployment',
      edit: (yaml: string) => broken(yaml, 'rateLimitDeployment:', 'rateLimitDeploymnt:'),
      message: 'json: unknown field "rateLimitDeploymnt"',
    },
    {
      fault: 'a backend other than Redis',
      edit: (yaml: string) => broken(yaml, 'type: Redis', 'type: Memcached'),
      message: 'unsupported ratelimit backend Memcached',
    },
    {
      fault: 'an IP address in redis.url',
      edit: (yaml: string) => broken(yaml, /url: \S+:6379/, 'url: 10.0.0.5:6379'),
      message:
        'unknown ratelimit redis url format: parse "10.0.0.5:6379": first path segment in URL cannot contain colon',
    },
  ])(
    'refuses $fault, in the ConfigMap and in the Helm values',
    async ({ fault, edit, message }) => {
      for (const { yaml, what } of configs()) {
        const file = write(`${what} ${fault}`, edit(yaml));
        expect(await validateEnvoyGateway(file)).toEqual({
          code: 1,
          stdout: `${file}: document 1: ${message}\n`,
          stderr: '',
        });
      }
    },
  );

  it('refuses any other kind, so that a policy is never passed for a configuration', async () => {
    const [policy] = blocks().filter(({ checker }) => checker === 'egctl');
    const file = write('policy-as-config', policy!.yaml);
    const { code, stdout } = await validateEnvoyGateway(file);
    expect(code).toBe(1);
    expect(stdout).toContain('kind "BackendTrafficPolicy" is not an EnvoyGateway configuration');
  });

  const policy = () => blocks().find(({ checker }) => checker === 'egctl')!.yaml;

  it.each([
    {
      fault: 'a unit that is not one of its values',
      edit: (yaml: string) => broken(yaml, 'unit: Minute', 'unit: Minutes'),
      message:
        'spec.rateLimit.global.rules[0].limit.unit: Unsupported value: "Minutes": supported values: "Second", "Minute", "Hour", "Day", "Week", "Month", "Year"',
    },
    {
      fault: 'a misspelt clientSelectors',
      edit: (yaml: string) => broken(yaml, 'clientSelectors:', 'clientSelector:'),
      message:
        'spec.rateLimit.global.rules[0].clientSelector: Invalid value: value provided for unknown field',
    },
    {
      fault: 'requests that are not a number',
      edit: (yaml: string) => broken(yaml, /requests: \d+/, 'requests: three'),
      message:
        'spec.rateLimit.global.rules[0].limit.requests in body must be of type integer: "string"',
    },
    {
      fault: 'a header match type that does not exist',
      edit: (yaml: string) => broken(yaml, 'type: Distinct', 'type: Different'),
      message:
        'spec.rateLimit.global.rules[0].clientSelectors[0].headers[0].type: Unsupported value: "Different"',
    },
  ])('refuses a policy with $fault, though egctl exits 0', async ({ fault, edit, message }) => {
    const { code, stdout } = await egctl(write(`policy ${fault}`, edit(policy())));
    expect(code).toBe(0);
    const verdict = egctlVerdict(stdout);
    expect(verdict.valid).toBe(false);
    expect(verdict.errors.join('\n')).toContain(message);
  });
});
