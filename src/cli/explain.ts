// `tollgate explain`: shows offline which rule a descriptor matches, and why.
import { explainMatch, type Attempt } from '../rules/explain.js';
import {
  DESCRIPTOR_HELP,
  loadDomain,
  parse,
  parseDescriptor,
  required,
  showEntries,
  type Command,
} from './args.js';

const usage = `Usage: tollgate explain [--config PATH] --domain DOMAIN --descriptor K=V[,K=V...]
                        [--descriptor ...]

Shows, offline, how each descriptor is matched against the rules, level by level: the exact
value, then each wildcard in file order, then the bare key; which rule each entry lands on; and
which limit applies in the end, or why none does.

${DESCRIPTOR_HELP}

Options:
  --config PATH         a rules file or directory; default CONFIG_PATH as the service reads it
  --domain DOMAIN       the rules' domain
  --descriptor K=V,...  a descriptor; repeat for several
  -h, --help            Show this help`;

export const explain: Command = {
  name: 'explain',
  summary: 'show offline which rule a descriptor matches, and why',
  usage,
  async run(args) {
    const { values } = parse({
      args,
      options: {
        config: { type: 'string' },
        domain: { type: 'string' },
        descriptor: { type: 'string', multiple: true },
        help: { type: 'boolean', short: 'h' },
      },
    });
    if (values.help) {
      console.log(usage);
      return 0;
    }
    const domain = required(values.domain, '--domain');
    const descriptors = required(values.descriptor, '--descriptor').map(parseDescriptor);
    const rules = loadDomain(values.config, domain);
    for (const entries of descriptors) {
      const { steps, reason } = explainMatch(rules, entries);
      console.log(`${domain} ${showEntries(entries)}`);
      for (const step of steps) {
        console.log(`  ${step.index + 1}. ${showEntries([step.entry])}`);
        for (const attempt of step.attempts) {
          console.log(`       ${showAttempt(step.entry.key, attempt)}`);
        }
      }
      console.log(`  => ${reason}`);
    }
    return 0;
  },
};

function showAttempt(key: string, { kind, value, rule, matched }: Attempt): string {
  const what =
    kind === 'bare'
      ? `bare key ${JSON.stringify(key)}`
      : `${kind === 'exact' ? 'exact' : 'wildcard'} ${JSON.stringify(value)}`;
  if (rule === undefined) return `${what}: no rule`;
  return matched ? `${what}: matches ${rule}` : `${what} at ${rule}: no match`;
}
