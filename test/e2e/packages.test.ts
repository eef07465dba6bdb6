// The two npm packages as a user gets them: @tollgate/client's tarball installed into an empty
// project, imported as an ES module, required as CommonJS and type-checked, against a running
// tollgate; and tollgate's own tarball, installed alone into another, serving from there.
//
// globalSetup has just built both packages, so they are packed with --ignore-scripts: `prepack`
// would build them again, rewriting dist/ under the services of the test files running beside.
import { execFile } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { spawnTollgate } from '../support/processes.js';
import { callCheck, d, startTollgate, type Tollgate } from '../support/tollgate.js';

const run = promisify(execFile);
const root = fileURLToPath(new URL('../../', import.meta.url));
const clientDir = join(root, 'packages', 'client');

/** npm as a user runs it: without the package and lifecycle variables of the `npm test` above. */
function npm(args: string[], cwd: string): Promise<{ stdout: string }> {
  const env = Object.fromEntries(
    Object.entries(process.env).filter(
      ([name]) =>
        !/^npm_(package_|lifecycle_|config_(local_prefix|prefix|global_prefix|workspaces?)$)/i.test(
          name,
        ),
    ),
  );
  return run('npm', [...args, '--no-audit', '--no-fund', '--no-update-notifier'], { cwd, env });
}

async function packedFiles(
  cwd: string,
  args: string[],
): Promise<{ file: string; paths: string[] }> {
  const { stdout } = await npm(['pack', '--json', '--ignore-scripts', ...args], cwd);
  const [packed] = JSON.parse(stdout) as { filename: string; files: { path: string }[] }[];
  return { file: packed!.filename, paths: packed!.files.map((file) => file.path).sort() };
}

const RULES = `
domain: pack
descriptors:
  - key: caller
    rate_limit: {unit: minute, requests_per_unit: 1}
`;

/** Checks twice on a limit of 1 and prints the codes, with what the module's exports are. */
const CHECK_TWICE = `
async function main() {
  const client = createTollgateClient({
    address: process.argv[2],
    deadlineMs: 10000,
    whenUnavailable: 'throw',
  });
  const request = { domain: 'pack', descriptors: [{ caller: process.argv[3] }] };
  const codes = [];
  for (let i = 0; i < 2; i++) codes.push((await client.check(request)).code);
  client.close();
  console.log(JSON.stringify({ codes, exports: Object.keys(loaded).sort() }));
}
main().catch((error) => {
  console.error(error);
  process.exit(1);
});
`;

describe('@tollgate/client, installed from its tarball', () => {
  let project: string;
  let packed: { file: string; paths: string[] };
  let tollgate: Tollgate;
  beforeAll(async () => {
    project = mkdtempSync(join(tmpdir(), 'tollgate-client-user-'));
    tollgate = await startTollgate({ rules: RULES });
    packed = await packedFiles(clientDir, ['--pack-destination', project]);
    writeFileSync(join(project, 'package.json'), '{ "name": "user", "private": true }\n');
    // From the npm cache that `npm ci` filled; the registry only for a package it lacks.
    await npm(['install', '--prefer-offline', `./${packed.file}`], project);
  }, 180_000);
  afterAll(async () => {
    await tollgate?.stop();
    if (project) rmSync(project, { recursive: true, force: true });
  });

  it('holds only what runs: the CommonJS build, the ES entry, the protos, and the license', () => {
    expect(packed.paths).toEqual(
      expect.arrayContaining([
        'LICENSE',
        'README.md',
        'dist/index.js',
        'dist/index.d.ts',
        'dist/package.json',
        'esm/index.js',
        'esm/index.d.ts',
        'proto/envoy/service/ratelimit/v3/rls.proto',
      ]),
    );
    const stray = packed.paths.filter(
      (path) =>
        !/^(dist|esm|proto)\//.test(path) &&
        !['LICENSE', 'README.md', 'package.json'].includes(path),
    );
    expect(stray).toEqual([]);
  });

  it('installs the gRPC client alone, none of the service', () => {
    const lock = JSON.parse(readFileSync(join(project, 'package-lock.json'), 'utf8')) as {
      packages: Record<string, unknown>;
    };
    const installed = Object.keys(lock.packages).filter((path) => path !== '');
    expect(installed).toContain('node_modules/@grpc/grpc-js');
    const service = /node_modules\/(ioredis|pino|prom-client|@opentelemetry\/|yaml|tollgate)/;
    expect(installed.filter((path) => service.test(path))).toEqual([]);
    // @grpc/grpc-js's own dependencies (proto-loader and protobufjs among them) are 32 packages.
    expect(installed.length).toBeLessThan(45);
  });

  it.each([
    {
      form: 'an ES module',
      file: 'check.mjs',
      head: "import * as loaded from '@tollgate/client';\nconst { createTollgateClient } = loaded;",
    },
    {
      form: 'CommonJS',
      file: 'check.cjs',
      head: "const loaded = require('@tollgate/client');\nconst { createTollgateClient } = loaded;",
    },
  ])('asks tollgate when loaded as $form: OK, then OVER_LIMIT on a limit of 1', async (form) => {
    writeFileSync(join(project, form.file), `${form.head}\n${CHECK_TWICE}`);
    const { stdout } = await run(process.execPath, [form.file, tollgate.address, form.file], {
      cwd: project,
    });
    const printed = JSON.parse(stdout) as { codes: string[]; exports: string[] };
    expect(printed.codes).toEqual(['OK', 'OVER_LIMIT']);
    expect(printed.exports.filter((name) => name !== '__esModule')).toEqual([
      'TollgateError',
      'TollgateRequestError',
      'TollgateUnavailableError',
      'createRateLimitClient',
      'createTollgateClient',
    ]);
  });

  it('gives import and require one copy of the error classes', async () => {
    writeFileSync(
      join(project, 'same.mjs'),
      [
        "import { createRequire } from 'node:module';",
        "import { TollgateError } from '@tollgate/client';",
        "const required = createRequire(import.meta.url)('@tollgate/client');",
        'console.log(required.TollgateError === TollgateError);',
      ].join('\n'),
    );
    const { stdout } = await run(process.execPath, ['same.mjs'], { cwd: project });
    expect(stdout.trim()).toBe('true');
  });

  it('type-checks with its types, imported and required', async () => {
    const use = `
const client = createTollgateClient({ address: 'localhost:8081', whenUnavailable: 'allow' });
export async function allowed(): Promise<boolean> {
  const result: CheckResult = await client.check({ domain: 'api', descriptors: [{ a: 'b' }] });
  return result.allowed && !(result.error instanceof TollgateError);
}`;
    writeFileSync(
      join(project, 'use.mts'),
      `import { createTollgateClient, TollgateError, type CheckResult } from '@tollgate/client';${use}`,
    );
    writeFileSync(
      join(project, 'use.cts'),
      `import { createTollgateClient, TollgateError, type CheckResult } from '@tollgate/client';${use}`,
    );
    const tsc = join(root, 'node_modules', 'typescript', 'bin', 'tsc');
    const options = ['--noEmit', '--strict', '--module', 'nodenext', '--skipLibCheck'];
    await expect(
      run(process.execPath, [tsc, ...options, 'use.mts', 'use.cts'], { cwd: project }),
    ).resolves.toBeDefined();
  });
});

describe("tollgate's tarball, installed alone into an empty project", () => {
  let project: string;
  let packed: { file: string; paths: string[] };
  let installed: string[];
  beforeAll(async () => {
    project = mkdtempSync(join(tmpdir(), 'tollgate-service-user-'));
    packed = await packedFiles(root, ['--pack-destination', project]);
    writeFileSync(join(project, 'package.json'), '{ "name": "user", "private": true }\n');
    // No registry holds @tollgate/client: the tarball must not ask for it.
    await npm(['install', '--prefer-offline', `./${packed.file}`], project);
    const lock = JSON.parse(readFileSync(join(project, 'package-lock.json'), 'utf8')) as {
      packages: Record<string, unknown>;
    };
    installed = Object.keys(lock.packages);
  }, 240_000);
  afterAll(() => {
    if (project) rmSync(project, { recursive: true, force: true });
  });

  it('holds the build, the Lua scripts and the protos, and none of the sources', () => {
    expect(packed.paths).toEqual(
      expect.arrayContaining([
        'dist/index.js',
        'dist/index.d.ts',
        'dist/main.js',
        'dist/cli/main.js',
        'dist/vendor/client/esm/index.js',
        'proto/envoy/service/ratelimit/v3/rls.proto',
        'config/example.yaml',
        'LICENSE',
        'CHANGELOG.md',
      ]),
    );
    expect(packed.paths.some((path) => path.startsWith('lua/') && path.endsWith('.lua'))).toBe(
      true,
    );
    expect(packed.paths.filter((path) => /^(src|test|packages)\//.test(path))).toEqual([]);
  });

  it('installs without @tollgate/client', () => {
    expect(installed).toContain('node_modules/tollgate');
    expect(installed.filter((path) => path.includes('@tollgate/'))).toEqual([]);
  });

  it('serves from the install: `tollgate serve` answers a check', async () => {
    const bin = join(project, 'node_modules', 'tollgate', 'dist', 'cli', 'main.js');
    const served = await spawnTollgate(RULES, {}, { entry: [bin, 'serve'] });
    try {
      const check = { domain: 'pack', descriptors: [d('caller', 'installed')] };
      const answers = [];
      for (let i = 0; i < 2; i++)
        answers.push((await callCheck(served.client, check)).overall_code);
      expect(answers).toEqual(['OK', 'OVER_LIMIT']);
      // The command line's own client is the build's copy, so `query` works from here too.
      const query = [bin, 'query', '--addr', served.address, '--domain', 'pack', '--json'];
      const { stdout } = await run(process.execPath, [...query, '--descriptor', 'caller=cli'], {
        cwd: project,
      });
      expect((JSON.parse(stdout) as { code: string }).code).toBe('OK');
    } finally {
      await served.stop();
    }
  });
});
