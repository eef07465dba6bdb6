import { existsSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { parse } from 'yaml';

// What a workflow asks of this repository: the npm commands and the scripts its `run:` steps
// call, and the actions its steps use. test/unit/workflows.test.ts checks each against the
// repository, so that a renamed script or npm script breaks a test, not a release.

interface Step {
  run?: string;
  uses?: string;
}

interface Workflow {
  jobs?: Record<string, { steps?: Step[]; uses?: string }>;
}

/** Each `run:` script and each `uses:` (a step's, or a job's reusable workflow) of a workflow. */
export function workflowParts(text: string): { runs: string[]; uses: string[] } {
  const workflow = (parse(text) ?? {}) as Workflow;
  const jobs = Object.values(workflow.jobs ?? {});
  const steps = jobs.flatMap((job) => job.steps ?? []);
  return {
    runs: steps.flatMap((step) => (step.run === undefined ? [] : [step.run])),
    uses: [
      ...jobs.flatMap((job) => (job.uses === undefined ? [] : [job.uses])),
      ...steps.flatMap((step) => (step.uses === undefined ? [] : [step.uses])),
    ],
  };
}

/** A package.json of the repository: the root's, or the workspace that `--workspace` names. */
interface Manifest {
  name: string;
  dir: string;
  scripts: Record<string, string>;
  workspaces?: string[];
}

function manifest(root: string, dir: string): Manifest {
  const json = JSON.parse(readFileSync(join(root, dir, 'package.json'), 'utf8')) as Manifest;
  return { ...json, dir, scripts: json.scripts ?? {} };
}

/** The words of one shell command, quotes dropped; enough for the commands workflows run. */
function words(command: string): string[] {
  return command
    .trim()
    .split(/\s+/)
    .map((word) => word.replace(/^["']|["']$/g, ''));
}

/** The workspace an npm command line selects (`--workspace X`, `--workspace=X`, `-w X`), if any. */
function selectWorkspace(args: string[]): { workspace?: string; rest: string[] } {
  const rest: string[] = [];
  let workspace: string | undefined;
  for (let i = 0; i < args.length; i++) {
    const arg = args[i]!;
    if (arg === '--workspace' || arg === '-w') workspace = args[++i];
    else if (arg.startsWith('--workspace=')) workspace = arg.slice('--workspace='.length);
    else rest.push(arg);
  }
  return { workspace, rest };
}

/** Faults of one npm command line (its words after `npm`), against the repository's packages. */
function npmFaults(args: string[], root: string): string[] {
  const line = `npm ${args.join(' ')}`;
  const service = manifest(root, '.');
  const { workspace, rest } = selectWorkspace(args);
  const target =
    workspace === undefined
      ? service
      : (service.workspaces ?? [])
          .map((dir) => manifest(root, dir))
          .find((pkg) => pkg.name === workspace || pkg.dir === workspace);
  if (target === undefined) return [`${line}: no workspace ${workspace}`];
  const [command, ...operands] = rest;
  if (command === 'ci' && !existsSync(join(root, 'package-lock.json'))) {
    return [`${line}: no package-lock.json`];
  }
  const script =
    command === 'test'
      ? 'test'
      : command === 'run'
        ? operands.find((arg) => !arg.startsWith('-'))
        : undefined;
  if (script !== undefined && target.scripts[script] === undefined) {
    return [`${line}: ${join(target.dir, 'package.json')} has no script "${script}"`];
  }
  return [];
}

/**
 * Faults of the `run:` scripts of a workflow: an npm command naming a script or a workspace that
 * does not exist, or a path under scripts/ or .ci/ that is not in the repository.
 */
export function runFaults(run: string, root: string): string[] {
  const faults: string[] = [];
  for (const command of run.split(/\n|&&|\|\||;|\|/)) {
    const [first, ...args] = words(command);
    if (first === 'npm') faults.push(...npmFaults(args, root));
  }
  for (const [, path] of run.matchAll(/(?:^|[\s"'=])((?:\.\/)?(?:scripts|\.ci)\/[\w.\-/]+)/g)) {
    if (!existsSync(join(root, path!))) faults.push(`${path}: no such file`);
  }
  return faults;
}

/**
 * Faults of a `uses:`: a local workflow or action that does not exist, or a third-party action
 * not pinned to a full commit SHA with its release tag beside it (`owner/name@SHA # vX.Y.Z`).
 */
export function usesFaults(uses: string, text: string, root: string): string[] {
  if (uses.startsWith('./')) return existsSync(join(root, uses)) ? [] : [`${uses}: no such file`];
  const pinned = new RegExp(`uses: ${uses.replace(/[.*+?^${}()|[\]\\]/g, '\\$&')} # v\\d`);
  if (!/^[\w.-]+\/[\w./-]+@[0-9a-f]{40}$/.test(uses) || !pinned.test(text)) {
    return [`${uses}: not pinned to a commit SHA with its tag in a comment`];
  }
  return [];
}
