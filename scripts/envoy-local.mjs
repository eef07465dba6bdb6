// `npm run envoy:local [-- --tollgate HOST:PORT] [--upstream HOST:PORT] [--out FILE | FILE]`:
// writes envoy/envoy.yaml with its two clusters pointed elsewhere, for an Envoy that runs outside
// Docker Compose. By default: tollgate at 127.0.0.1:8081, the upstream at 127.0.0.1:5678, into
// envoy/envoy-local.yaml. A relative FILE is taken from where the command was run. `--check`
// fails when envoy/envoy-local.yaml is not what the defaults give.
import { readFileSync, writeFileSync } from 'node:fs';
import { join, relative, resolve } from 'node:path';
import { parseArgs } from 'node:util';
import { root } from './goBuild.mjs';

export const DEFAULTS = { tollgate: '127.0.0.1:8081', upstream: '127.0.0.1:5678' };
const SOURCE = join(root, 'envoy', 'envoy.yaml');
const LOCAL = join(root, 'envoy', 'envoy-local.yaml');

function hostPort(option, text) {
  const match = /^(\[[0-9a-fA-F:.]+\]|[A-Za-z0-9._-]+):(\d{1,5})$/.exec(text);
  const port = Number(match?.[2]);
  if (!match || port < 1 || port > 65_535) {
    throw new Error(`--${option}: '${text}' is not HOST:PORT`);
  }
  return { address: match[1].replace(/^\[(.*)\]$/, '$1'), port_value: port };
}

/**
 * envoy/envoy.yaml's text with the clusters `tollgate` and `upstream` at these addresses. The
 * text is edited in place rather than re-serialized, so comments and layout stay as written.
 */
export function localBootstrap(addresses = DEFAULTS) {
  let text = readFileSync(SOURCE, 'utf8');
  for (const [name, hostAndPort] of Object.entries(addresses)) {
    const { address, port_value } = hostPort(name, hostAndPort);
    const start = text.indexOf(`\n    - name: ${name}\n`, text.indexOf('\n  clusters:\n'));
    const end = text.indexOf('\n    - name: ', start + 1);
    const cluster = text.slice(start, end === -1 ? undefined : end);
    const socket = /socket_address: \{ address: [^,]+, port_value: \d+ \}/;
    if (start === -1 || !socket.test(cluster)) {
      throw new Error(`envoy/envoy.yaml has no cluster '${name}' with one socket_address`);
    }
    const moved = cluster.replace(
      socket,
      `socket_address: { address: '${address}', port_value: ${port_value} }`,
    );
    text = text.slice(0, start) + moved + text.slice(start + cluster.length);
  }
  const header = [
    '# Generated from envoy.yaml by `npm run envoy:local`; edit that file, then run the command again.',
    `# The same bootstrap, with tollgate at ${addresses.tollgate} and the upstream at ${addresses.upstream},`,
    '# for an Envoy that runs outside Docker Compose.',
  ];
  return `${header.join('\n')}\n${text}`;
}

/**
 * The file to write: FILE or --out FILE as the user wrote it, relative to the directory the
 * command was run in (npm runs scripts from the package root, and says where it was run in
 * INIT_CWD); by default envoy/envoy-local.yaml.
 */
function outputFile(values, positionals) {
  const given = positionals[0] ?? values.out;
  if (positionals.length > 1 || (positionals.length === 1 && values.out !== undefined)) {
    throw new Error('give the output file once, as FILE or --out FILE');
  }
  const here = process.env.INIT_CWD ?? process.cwd();
  if (given === undefined) return { path: LOCAL, shown: relative(here, LOCAL) };
  if (given === '') throw new Error('--out: the file name is empty');
  return { path: resolve(here, given), shown: given };
}

if (import.meta.url === `file://${process.argv[1]}`) {
  try {
    const { values, positionals } = parseArgs({
      options: {
        tollgate: { type: 'string', default: DEFAULTS.tollgate },
        upstream: { type: 'string', default: DEFAULTS.upstream },
        out: { type: 'string' },
        check: { type: 'boolean', default: false },
      },
      allowPositionals: true,
    });
    const text = localBootstrap({ tollgate: values.tollgate, upstream: values.upstream });
    if (values.check) {
      if (readFileSync(LOCAL, 'utf8') !== text) {
        throw new Error(`${relative(root, LOCAL)} is out of date: run npm run envoy:local`);
      }
    } else {
      const out = outputFile(values, positionals);
      writeFileSync(out.path, text);
      console.error(`envoy-local: wrote ${out.shown}`);
    }
  } catch (error) {
    console.error(`envoy-local: ${error.message}`);
    process.exit(1);
  }
}
