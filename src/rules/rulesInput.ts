import { basename } from 'node:path';
import { loadRules, type LoadRulesOptions } from './loadRules.js';
import type { RuleSet } from './types.js';
import { loadXdsRules, type XdsResource } from './xdsRules.js';

/** Where the rules come from: the rules files, or the resources of one xDS update. */
export type RulesInput =
  | { kind: 'files'; configPath: string }
  | { kind: 'xds'; version: string; resources: XdsResource[] };

export function loadSource(source: RulesInput, options: LoadRulesOptions): RuleSet {
  return source.kind === 'files'
    ? loadRules(source.configPath, options)
    : loadXdsRules(source.resources, options);
}

/** How errors about the source as a whole name it. */
export function sourceName(source: RulesInput): string {
  return source.kind === 'files' ? basename(source.configPath) : `xDS version '${source.version}'`;
}
