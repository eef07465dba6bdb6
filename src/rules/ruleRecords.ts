/**
 * A `RuleSet` as a stream of small plain records, and back, so that rules loaded on another
 * thread reach the serving thread in batches: each batch is copied and rebuilt in a few
 * milliseconds, where one structured clone of a 50,000-rule set would hold the event loop for a
 * quarter of a second.
 *
 * The records list each domain, then its rules depth first, parents before children; each level
 * in the order its lookups keep (exact values, then wildcards in file order, then bare keys), so
 * that rebuilding them in order gives the same precedence.
 */
import { emptyLevel, placeRule } from './level.js';
import type { DomainRules, RuleLevel, RuleNode, RuleSet } from './types.js';

/** A rule without its links: they are the `parent` index and the level it is added to. */
export type NodeFields = Omit<RuleNode, 'children' | 'parent'>;

export type RuleRecord =
  | { domain: string; tenantKey: string | undefined; file: string }
  | { node: NodeFields; parent: number };

/** Every record of `rules`, in the order `createRuleAssembler` takes them. */
export function* ruleRecords(rules: RuleSet): Generator<RuleRecord> {
  for (const domain of rules.domains.values()) {
    yield { domain: domain.domain, tenantKey: domain.tenantKey, file: domain.file };
    let next = 0;
    const walk = function* (level: RuleLevel, parent: number): Generator<RuleRecord> {
      for (const node of levelNodes(level)) {
        const index = next++;
        const { children, parent: _parent, ...fields } = node; // the links are rebuilt
        yield { node: fields, parent };
        yield* walk(children, index);
      }
    };
    yield* walk(domain.root, -1);
  }
}

function* levelNodes(level: RuleLevel): Generator<RuleNode> {
  for (const byValue of level.exact.values()) yield* byValue.values();
  for (const wildcard of level.wildcards) yield wildcard.node;
  yield* level.bare.values();
}

export interface RuleAssembler {
  add(records: readonly RuleRecord[]): void;
  /** The rules, once every record was added. */
  finish(): RuleSet;
}

export function createRuleAssembler(): RuleAssembler {
  const domains = new Map<string, DomainRules>();
  let current: DomainRules | undefined;
  let nodes: RuleNode[] = [];
  return {
    add(records) {
      for (const record of records) {
        if ('domain' in record) {
          current = { ...record, root: emptyLevel() };
          domains.set(record.domain, current);
          nodes = [];
          continue;
        }
        if (current === undefined) throw new Error('a rule record before its domain');
        const parent = record.parent < 0 ? undefined : nodes[record.parent];
        const node: RuleNode = { ...record.node, children: emptyLevel(), parent };
        nodes.push(node);
        placeRule(parent === undefined ? current.root : parent.children, node);
      }
    },
    finish: () => ({ domains }),
  };
}
