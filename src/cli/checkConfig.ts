import { describeLimit, isEmptyLevel } from '../rules/explain.js';
import { loadRules } from '../rules/loadRules.js';
import type { DomainRules, RuleLevel, RuleNode } from '../rules/types.js';
import { environment, parse, UsageError, type Command } from './args.js';

const usage = `Usage: tollgate check-config PATH

Loads the rules at PATH (a rules file, or a directory of *.yaml/*.yml files) as the service
would, with DEFAULT_ALGORITHM from the environment, and prints one line per rule:

  DOMAIN KEY=VALUE ... => requests_per_unit=N unit=U|window=W algorithm=A [burst=B] [name="N"]

A bare key (any value) prints as KEY alone; a rule that is unlimited prints '=> unlimited', and
a last-level rule without rate_limit '=> no rate_limit'. Exits 1 with the error on a bad file.

Options:
  -h, --help  Show this help`;

export const checkConfig: Command = {
  name: 'check-config',
  summary: 'validate a rules file or directory and print its rules',
  usage,
  async run(args) {
    const { values, positionals } = parse({
      args,
      options: { help: { type: 'boolean', short: 'h' } },
      allowPositionals: true,
    });
    if (values.help) {
      console.log(usage);
      return 0;
    }
    const [path, ...extra] = positionals;
    if (path === undefined) throw new UsageError('PATH is required');
    if (extra.length > 0) throw new UsageError(`unexpected argument '${extra[0]}'`);
    const rules = loadRules(path, { defaultAlgorithm: environment().defaultAlgorithm });
    for (const domain of rules.domains.values()) {
      for (const line of ruleLines(domain)) console.log(line);
    }
    return 0;
  },
};

/** One line per rule that decides something, in file order. */
function ruleLines(domain: DomainRules): string[] {
  const lines: string[] = [];
  const visit = (node: RuleNode, prefix: string) => {
    const at = `${prefix} ${show(node.key)}${node.value === undefined ? '' : `=${show(node.value)}`}`;
    const leaf = isEmptyLevel(node.children);
    if (node.limit !== undefined) lines.push(`${at} => ${describeLimit(node.limit)}`);
    else if (node.unlimited) lines.push(`${at} => unlimited`);
    else if (leaf) lines.push(`${at} => no rate_limit`);
    for (const child of inFileOrder(node.children)) visit(child, at);
  };
  for (const node of inFileOrder(domain.root)) visit(node, show(domain.domain));
  return lines;
}

/** Quoted when it would not read back as one word. */
const show = (text: string): string =>
  text !== '' && /^[^\s"=]+$/.test(text) ? text : JSON.stringify(text);

/** A level's rules in file order; its index keeps them by precedence instead. */
function inFileOrder(level: RuleLevel): RuleNode[] {
  const nodes = [
    ...[...level.exact.values()].flatMap((byValue) => [...byValue.values()]),
    ...level.wildcards.map((wildcard) => wildcard.node),
    ...level.bare.values(),
  ];
  const position = (node: RuleNode) => Number(/\[(\d+)\]$/.exec(node.path)?.[1] ?? 0);
  return nodes.sort((a, b) => position(a) - position(b));
}
