import { readFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';

/** The order matters: helpers, then the algorithms that register themselves, then the dispatcher. */
const PARTS = [
  'lib.lua',
  'fixed_window.lua',
  'sliding_window.lua',
  'token_bucket.lua',
  'dispatch.lua',
];

/** Joins `lua/` into the one decision script, so every request is one EVALSHA of one SHA. */
export function loadDecisionScript(): string {
  const dir = new URL('../../lua/', import.meta.url);
  return PARTS.map((name) => readFileSync(fileURLToPath(new URL(name, dir)), 'utf8')).join('\n');
}

export const ALGORITHM_CODES = { fixed_window: 1, sliding_window: 2, token_bucket: 3 } as const;
