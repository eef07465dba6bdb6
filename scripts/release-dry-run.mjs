// `node scripts/release-dry-run.mjs`: a dry run of .github/workflows/release.yml for
// package.json's version, with nothing published. It builds what the workflow publishes, as a
// user gets it, into a temporary folder that it removes at exit, and leaves the checkout as it
// found it:
//   - versions: every version is package.json's (scripts/release-versions.mjs), and CHANGELOG.md,
//     dated as the release commit dates it, gives the GitHub release's notes
//     (scripts/release-notes.mjs);
//   - npm: both packages packed as `npm publish` packs them, each installed alone into an empty
//     project; `tollgate --version` and `check-config` run, and the client imports and requires;
//     protobufjs's postinstall is the only install script in either tree (docs/releasing.md);
//   - an SBOM (CycloneDX) of the service's production dependencies, as installed from its tarball;
//   - chart: `helm lint`, `helm package`, and `helm template` of the packaged chart;
//   - the SHA-256 of the tarballs and the chart.
// `--out DIR` keeps the tarballs, the chart, the SBOM, the notes and SHA256SUMS in DIR.
// It cannot build the multi-platform image, sign it or the chart with cosign, attest, or publish
// to npm, ghcr.io or GitHub: those need a Docker engine, the registries' credentials and the
// workflow's OIDC token. It prints each step, and exits 1 at the first that fails.
import { spawnSync } from 'node:child_process';
import { createHash } from 'node:crypto';
import {
  cpSync,
  mkdirSync,
  mkdtempSync,
  readFileSync,
  readdirSync,
  rmSync,
  writeFileSync,
} from 'node:fs';
import { tmpdir } from 'node:os';
import { basename, join, relative, resolve } from 'node:path';
import { root } from './goBuild.mjs';
import { installHelm } from './helm.mjs';
import { releaseChangelog, releaseNotes } from './release-notes.mjs';

// GitHub refuses a release whose notes are longer.
const NOTES_LIMIT = 125_000;
// Its postinstall only compares how a dependent names its version with protobufjs's scheme.
const KNOWN_INSTALL_SCRIPTS = ['protobufjs'];

const service = JSON.parse(readFileSync(join(root, 'package.json'), 'utf8'));
const client = JSON.parse(readFileSync(join(root, 'packages/client/package.json'), 'utf8'));
const version = service.version;

class DryRunError extends Error {}

function check(condition, message) {
  if (!condition) throw new DryRunError(message);
}

/** npm and the rest as a user runs them: without the variables of an `npm run` around this. */
const env = Object.fromEntries(
  Object.entries(process.env).filter(([name]) => !/^npm_(package|lifecycle|config)_/i.test(name)),
);

/** Runs a command to its end; its stdout, or a DryRunError with its output. */
function run(command, args, cwd = root) {
  const result = spawnSync(command, args, { cwd, env, encoding: 'utf8', maxBuffer: 64 << 20 });
  const output = `${result.stdout ?? ''}${result.stderr ?? ''}`.trim();
  check(
    !result.error && result.status === 0,
    `${basename(command)} ${args.join(' ')} failed: ${result.error?.message ?? output}`,
  );
  return { stdout: result.stdout };
}

const npm = (args, cwd) => run('npm', [...args, '--no-audit', '--no-fund'], cwd);

function step(name, action) {
  const started = Date.now();
  console.log(`release-dry-run: ${name}`);
  const said = action();
  const seconds = ((Date.now() - started) / 1000).toFixed(1);
  for (const line of [said].flat().filter(Boolean)) console.log(`  ${line}`);
  console.log(`  (${seconds} s)`);
}

function versions(dir) {
  run(process.execPath, ['scripts/release-versions.mjs', version]);
  const date = new Date().toISOString().slice(0, 10);
  const changelog = readFileSync(join(root, 'CHANGELOG.md'), 'utf8');
  let notes;
  try {
    notes = releaseNotes(releaseChangelog(changelog, version, date), version);
  } catch (error) {
    throw new DryRunError(error.message);
  }
  check(
    notes.length <= NOTES_LIMIT,
    `the notes are ${notes.length} characters: over GitHub's limit`,
  );
  writeFileSync(join(dir, 'notes.md'), notes);
  check(
    service.repository.url === client.repository.url,
    `the packages name two repositories: ${service.repository.url}, ${client.repository.url}`,
  );
  return [
    `every version is ${version}`,
    `the notes of "## [${version}] - ${date}": ${notes.split('\n').length} lines, ${notes.length} characters`,
  ];
}

/** `npm pack` of a package, as `npm publish` packs it (prepack builds it); the tarball's path. */
function pack(dir, workspace) {
  const args = ['pack', '--json', '--pack-destination', dir];
  const { stdout } = npm(workspace ? [...args, '--workspace', workspace] : args);
  // The JSON follows whatever the build printed.
  const [packed] = JSON.parse(stdout.slice(stdout.search(/^\[$/m)));
  return join(dir, packed.filename);
}

/** The packages under node_modules (scoped ones included), with their package.json. */
function installedPackages(project) {
  const found = [];
  const walk = (modules) => {
    for (const name of safeList(modules)) {
      if (name.startsWith('.')) continue;
      if (name.startsWith('@')) {
        for (const scoped of safeList(join(modules, name))) visit(join(modules, name, scoped));
      } else {
        visit(join(modules, name));
      }
    }
  };
  const visit = (dir) => {
    found.push(JSON.parse(readFileSync(join(dir, 'package.json'), 'utf8')));
    walk(join(dir, 'node_modules'));
  };
  walk(join(project, 'node_modules'));
  return found;
}

function safeList(dir) {
  try {
    return readdirSync(dir);
  } catch {
    return [];
  }
}

/** Installs a tarball alone into a new empty project; its folder, and what it installed. */
function installAlone(dir, name, tarball) {
  const project = join(dir, name);
  mkdirSync(project);
  // A version, so that `npm sbom` can name the project.
  writeFileSync(
    join(project, 'package.json'),
    '{ "name": "user", "version": "0.0.0", "private": true }\n',
  );
  npm(['install', '--prefer-offline', tarball], project);
  const installed = installedPackages(project);
  const scripted = installed
    .filter(({ scripts = {} }) => ['preinstall', 'install', 'postinstall'].some((s) => scripts[s]))
    .map((pkg) => pkg.name);
  const unknown = scripted.filter((pkg) => !KNOWN_INSTALL_SCRIPTS.includes(pkg));
  check(unknown.length === 0, `${name}: new install scripts in ${unknown.join(', ')}`);
  const kb = Number(run('du', ['-sk', join(project, 'node_modules')]).stdout.split('\t')[0]);
  const size = `${installed.length} packages, ${(kb / 1024).toFixed(1)} MiB on disk`;
  return { project, size, scripts: scripted.join(', ') || 'none' };
}

function servicePackage(dir, tarball) {
  const { project, size, scripts } = installAlone(dir, 'service', tarball);
  const bin = join(project, 'node_modules', '.bin', 'tollgate');
  const printed = run(bin, ['--version'], project).stdout.trim();
  check(printed === `tollgate ${version}`, `tollgate --version printed "${printed}"`);
  run(bin, ['check-config'], project);
  return { project, said: [`${size}; install scripts: ${scripts}`, `${printed}; check-config OK`] };
}

function clientPackage(dir, tarball) {
  const { project, size, scripts } = installAlone(dir, 'client', tarball);
  const name = client.name;
  const esm = `import { createTollgateClient } from '${name}'; console.log(typeof createTollgateClient);`;
  const cjs = `console.log(typeof require('${name}').createTollgateClient);`;
  for (const [flag, code] of [
    ['--input-type=module', esm],
    ['--input-type=commonjs', cjs],
  ]) {
    const printed = run(process.execPath, [flag, '-e', code], project).stdout.trim();
    check(printed === 'function', `${name} ${flag}: createTollgateClient is ${printed}`);
  }
  return [`${size}; install scripts: ${scripts}`, 'imports as ESM and requires as CommonJS'];
}

/** `npm sbom` of the project the service's tarball went into, checked and written to dir. */
function sbom(dir, project) {
  const { stdout } = npm(['sbom', '--omit', 'dev', '--sbom-format', 'cyclonedx'], project);
  writeFileSync(join(dir, `tollgate-${version}.cdx.json`), stdout);
  let bom;
  try {
    bom = JSON.parse(stdout);
  } catch (error) {
    throw new DryRunError(`npm sbom printed no JSON: ${error.message}`);
  }
  check(bom.bomFormat === 'CycloneDX', `npm sbom wrote no CycloneDX document`);
  const components = new Set(bom.components.map(({ name, version }) => `${name}@${version}`));
  const wanted = [[service.name, version], ...Object.entries(service.dependencies)];
  const missing = wanted.map(([name, at]) => `${name}@${at}`).filter((c) => !components.has(c));
  check(missing.length === 0, `the SBOM leaves out ${missing.join(', ')}`);
  return (
    `CycloneDX ${bom.specVersion}, ${components.size} components: tollgate@${version}, and each ` +
    `of its ${wanted.length - 1} dependencies at its pinned version among them`
  );
}

function chart(dir) {
  const helm = installHelm();
  run(helm, ['lint', 'deploy/helm/tollgate']);
  const destination = join(dir, 'chart');
  run(helm, ['package', 'deploy/helm/tollgate', '--destination', destination]);
  const packaged = join(destination, `tollgate-${version}.tgz`);
  const rendered = run(helm, ['template', 'tollgate', packaged]).stdout;
  const image = `image: "ghcr.io/tollgate/tollgate:${version}"`;
  check(rendered.includes(image), `the packaged chart renders no ${image}`);
  check(
    rendered.includes(`helm.sh/chart: tollgate-${version}`),
    'the chart label is not the version',
  );
  return { file: packaged, said: `tollgate-${version}.tgz renders ${image}` };
}

function sha256(file) {
  return createHash('sha256').update(readFileSync(file)).digest('hex');
}

/** Every step in the workflow's order; the files a release would publish, beside the notes. */
function dryRun(dir) {
  step('versions job: versions and notes', () => versions(dir));
  const npmDir = join(dir, 'npm');
  const tarballs = {};
  step('npm job: pack both packages', () => {
    mkdirSync(npmDir);
    tarballs.client = pack(npmDir, client.name);
    tarballs.service = pack(npmDir);
    return Object.values(tarballs).map((file) => relative(dir, file));
  });
  let installed;
  step(`${service.name}, installed alone`, () => {
    installed = servicePackage(dir, tarballs.service);
    return installed.said;
  });
  step(`${client.name}, installed alone`, () => clientPackage(dir, tarballs.client));
  step('SBOM of the production dependencies', () => sbom(dir, installed.project));
  let packaged;
  step('chart job: lint, package and template', () => {
    packaged = chart(dir);
    return packaged.said;
  });
  step('SHA-256', () => {
    const files = [tarballs.service, tarballs.client, packaged.file];
    const sums = files.map((file) => `${sha256(file)}  ${relative(dir, file)}`);
    writeFileSync(join(dir, 'SHA256SUMS'), `${sums.join('\n')}\n`);
    return sums;
  });
}

const args = process.argv.slice(2);
const out = args[0] === '--out' && args.length === 2 ? resolve(args[1]) : undefined;
if (args.length > 0 && out === undefined) {
  console.error('usage: node scripts/release-dry-run.mjs [--out DIR]');
  process.exit(2);
}
const status = () => run('git', ['status', '--porcelain']).stdout;
const before = status();
const dir = mkdtempSync(join(tmpdir(), 'tollgate-release-'));
process.on('exit', () => rmSync(dir, { recursive: true, force: true }));
for (const signal of ['SIGINT', 'SIGTERM']) process.on(signal, () => process.exit(1));

try {
  console.log(`release-dry-run: tollgate ${version}, as .github/workflows/release.yml builds it`);
  dryRun(dir);
  check(status() === before, `the dry run changed the checkout:\n${status()}`);
  if (out) {
    for (const kept of ['npm', 'chart', 'notes.md', 'SHA256SUMS', `tollgate-${version}.cdx.json`]) {
      cpSync(join(dir, kept), join(out, kept), { recursive: true });
    }
    console.log(`release-dry-run: the tarballs, chart, SBOM, notes and SHA256SUMS are in ${out}`);
  }
  console.log(
    'release-dry-run: passed. Not run here: the image (buildx for two platforms, its SBOM and ' +
      'provenance), cosign signatures, attestations, and every publish: they need a Docker ' +
      "engine, the registries' credentials and the workflow's OIDC token.",
  );
} catch (error) {
  // A DryRunError says what failed; anything else is a fault of this script, with its stack.
  console.error(`release-dry-run: ${error instanceof DryRunError ? error.message : error.stack}`);
  process.exitCode = 1;
}
