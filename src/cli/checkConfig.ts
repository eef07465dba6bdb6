// `tollgate check-config`: validates a rules file or directory and prints its rules.
import { dumpRules } from '../rules/dumpRules.js';
import { checkConfigAt, positionalsOrHelp, UsageError, type Command } from './args.js';

const usage = `Usage: tollgate check-config [PATH]

Loads the rules at PATH (a rules file, or a directory of *.yaml/*.yml files; by default the
service's own, CONFIG_PATH or RUNTIME_ROOT's layout) as the service would, with
DEFAULT_ALGORITHM and MERGE_DOMAIN_CONFIG from the environment, and prints one line per rule
that has a limit or is unlimited, as GET /rlconfig does:

  DOMAIN.KEY_VALUE.KEY: unit=MINUTE|window=30s requests_per_unit=N, algorithm=A[, burst=B], ...

Exits 1 on bad rules, after one line for each bad file, naming the file, the path in it and
the key.

Options:
  -h, --help  Show this help`;

export const checkConfig: Command = {
  name: 'check-config',
  summary: 'validate a rules file or directory and print its rules',
  usage,
  async run(args) {
    const positionals = positionalsOrHelp(args, usage);
    if (positionals === undefined) return 0;
    const [path, ...extra] = positionals;
    if (extra.length > 0) throw new UsageError(`unexpected argument '${extra[0]}'`);
    const { rules, problems } = checkConfigAt(path);
    if (rules === undefined) {
      for (const problem of problems) console.error(`tollgate check-config: ${problem.message}`);
      return 1;
    }
    for (const line of dumpRules(rules)) console.log(line);
    return 0;
  },
};
