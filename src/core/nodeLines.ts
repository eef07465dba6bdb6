import { readFileSync } from 'node:fs';
import { boolean, type Env } from './envValues.js';
import { SettingsError } from './errors.js';

/**
 * The Node lines tollgate runs on, from package.json's `engines` (`^22 || ^24 || ^26`): the one
 * place that names them. A line outside them stops the service at start-up, unless
 * TOLLGATE_ALLOW_UNSUPPORTED_NODE says to run anyway, with a warning.
 */
export const ALLOW_UNSUPPORTED_NODE = 'TOLLGATE_ALLOW_UNSUPPORTED_NODE';

export function supportedNodeLines(): number[] {
  const manifest = JSON.parse(
    readFileSync(new URL('../../package.json', import.meta.url), 'utf8'),
  ) as { engines?: { node?: string } };
  return parseEngines(manifest.engines?.node ?? '');
}

/** `^22 || ^24 || ^26` as [22, 24, 26]; any other form is a mistake in package.json. */
export function parseEngines(range: string): number[] {
  const lines = range.split('||').map((part) => /^\s*\^(\d+)\s*$/.exec(part)?.[1]);
  if (lines.length === 0 || lines.some((line) => line === undefined)) {
    throw new Error(`package.json engines.node: '${range}' is not a list such as ^22 || ^24`);
  }
  return lines.map(Number);
}

/**
 * Whether this Node (`version`, as process.versions.node) may run the service: undefined when its
 * line is supported; a warning when it is not but the hatch is set. Otherwise it throws the
 * refusal, a SettingsError naming the lines and the hatch.
 */
export function checkNodeLine(
  version: string,
  env: Env,
  lines = supportedNodeLines(),
): string | undefined {
  // Read on every line, so that a bad value is refused before it matters.
  const allow = boolean(env, ALLOW_UNSUPPORTED_NODE, false);
  const line = Number(version.split('.')[0]);
  if (lines.includes(line)) return undefined;
  const supported = `${lines.slice(0, -1).join(', ')} or ${lines.at(-1)}`;
  if (allow) {
    return (
      `Node ${version} is not a supported line (${supported}): running anyway, since ` +
      `${ALLOW_UNSUPPORTED_NODE} is set`
    );
  }
  throw new SettingsError(
    `Node ${version} is not a supported line: tollgate runs on Node ${supported} ` +
      `(${ALLOW_UNSUPPORTED_NODE}=1 runs it anyway)`,
  );
}
