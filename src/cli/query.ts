// `tollgate query`: asks a running tollgate for a decision over gRPC, and prints it.
import type { DescriptorStatus } from '../core/check.js';
import { readFileSync } from 'node:fs';
import { isIP } from 'node:net';
import {
  createTollgateClient,
  type CheckResult,
  type TollgateClientOptions,
} from '@tollgate/client';
import type { Settings } from '../process/settings.js';
import {
  CommandError,
  DESCRIPTOR_HELP,
  environment,
  parse,
  parseDescriptor,
  required,
  showEntries,
  UsageError,
  wholeNumber,
  type Command,
} from './args.js';

const usage = `Usage: tollgate query [--addr HOST:PORT] --domain DOMAIN --descriptor K=V[,K=V...]
                      [--descriptor ...] [--hits N] [--refund] [--json]
                      [--tls] [--ca FILE] [--cert FILE --key FILE] [--server-name NAME]

Asks a running tollgate for a decision, as Envoy would, and prints it: the overall code, then
each descriptor's code, limit, remaining units and time until reset, then the response headers.
The check consumes, like any other; with --refund it gives the cost back instead
(is_negative_hits). Exits 0 when OK, 1 when OVER_LIMIT or when the call fails.

${DESCRIPTOR_HELP}

With the service's own settings in the environment (inside its container, say), it calls that
service as a client should: at GRPC_HOST:GRPC_PORT, over TLS when GRPC_SERVER_USE_TLS=true,
trusting GRPC_CLIENT_TLS_CACERT's CA for the server's certificate, and, when the service asks
for client certificates (GRPC_CLIENT_TLS_CACERT is set), presenting GRPC_SERVER_TLS_CERT and
GRPC_SERVER_TLS_KEY. The options below override each of these.

Options:
  --addr HOST:PORT      tollgate's gRPC address; default GRPC_HOST:GRPC_PORT (127.0.0.1 for
                        0.0.0.0)
  --domain DOMAIN       the rules' domain
  --descriptor K=V,...  a descriptor; repeat for several
  --hits N              the request's cost (hits_addend), 0 to 4294967295; default 1
  --refund              give the cost back to every descriptor's budget (is_negative_hits)
  --json                print the decision as JSON
  --tls                 TLS, even without GRPC_SERVER_USE_TLS=true
  --ca FILE             the CA that signed the server's certificate; default
                        GRPC_CLIENT_TLS_CACERT, else the system's
  --cert FILE, --key FILE
                        a client certificate and its key, for mutual TLS
  --server-name NAME    the name the server's certificate must carry, when not the address's
                        host; needed for TLS to an IP address (Node 26 refuses an IP as a
                        TLS server name)
  -h, --help            Show this help`;

const DEADLINE_MS = 5_000;
const UINT32_MAX = 4_294_967_295;
/** A status's `limit_remaining` when its rule is unlimited. */
const UNLIMITED_REMAINING = UINT32_MAX;

export const query: Command = {
  name: 'query',
  summary: 'ask a running tollgate for a decision (consumes), or give back (--refund)',
  usage,
  async run(args) {
    const { values } = parse({
      args,
      options: {
        addr: { type: 'string' },
        domain: { type: 'string' },
        descriptor: { type: 'string', multiple: true },
        hits: { type: 'string' },
        refund: { type: 'boolean' },
        json: { type: 'boolean' },
        tls: { type: 'boolean' },
        ca: { type: 'string' },
        cert: { type: 'string' },
        key: { type: 'string' },
        'server-name': { type: 'string' },
        help: { type: 'boolean', short: 'h' },
      },
    });
    if (values.help) {
      console.log(usage);
      return 0;
    }
    const connection = connectionOf(values, environment());
    const { address } = connection;
    const domain = required(values.domain, '--domain');
    const descriptors = required(values.descriptor, '--descriptor').map(parseDescriptor);
    const hitsAddend = wholeNumber(values.hits, '--hits', UINT32_MAX);

    const client = createTollgateClient({
      ...connection,
      deadlineMs: DEADLINE_MS,
      whenUnavailable: 'throw',
    });
    let result: CheckResult;
    try {
      result = await client.check({
        domain,
        descriptors: descriptors.map((entries) => {
          const pairs = entries.map((e) => [e.key, e.value] as const);
          return values.refund ? { entries: pairs, isNegativeHits: true } : pairs;
        }),
        ...(hitsAddend === undefined ? {} : { hitsAddend }),
      });
    } catch (error) {
      throw failedCall(address, error);
    } finally {
      client.close();
    }

    if (values.json) {
      console.log(JSON.stringify(result, null, 2));
    } else {
      const retry =
        result.retryAfterSeconds === undefined ? '' : `, retry after ${result.retryAfterSeconds}s`;
      console.log(`${result.code}${retry}`);
      result.statuses.forEach((status, i) => {
        console.log(`  ${showEntries(descriptors[i] ?? [])}: ${showStatus(status)}`);
      });
      for (const header of result.headers) console.log(`  header ${header.key}: ${header.value}`);
    }
    return result.allowed ? 0 : 1;
  },
};

/** The flags that say how to reach the service; each falls back to its own settings. */
interface ConnectionFlags {
  addr?: string;
  tls?: boolean;
  ca?: string;
  cert?: string;
  key?: string;
  'server-name'?: string;
}

/**
 * Where and how to call the service: the flags, else the service's own settings, read as a
 * client of it would take them (see the usage).
 */
function connectionOf(
  flags: ConnectionFlags,
  settings: Pick<Settings, 'grpcHost' | 'grpcPort' | 'grpcServer'>,
): Pick<TollgateClientOptions, 'address' | 'tls'> {
  const host = settings.grpcHost === '0.0.0.0' ? '127.0.0.1' : settings.grpcHost;
  const address = flags.addr ?? `${host}:${settings.grpcPort}`;
  if ((flags.cert === undefined) !== (flags.key === undefined)) {
    throw new UsageError('--cert and --key go together');
  }
  const served = settings.grpcServer.tls;
  if (!flags.tls && served === undefined && flags.ca === undefined && flags.cert === undefined) {
    return { address };
  }
  const serverName = flags['server-name'];
  if (serverName === undefined && isIP(hostOf(address)) !== 0) {
    // grpc-js gives TLS the address's host as the server name, which Node 26 refuses for an IP
    // address (RFC 6066 allows only names there).
    throw new UsageError(
      `TLS to an IP address (${address}) needs --server-name NAME: a DNS name in the server's certificate`,
    );
  }
  const ca = flags.ca ?? served?.clientCaPath;
  // The service's own certificate serves as the client's when it asks for one.
  const own = served?.clientCaPath === undefined ? undefined : served;
  const cert = flags.cert ?? own?.certPath;
  const key = flags.key ?? own?.keyPath;
  return {
    address,
    tls: {
      ...(ca === undefined
        ? {}
        : { ca: readFile(ca, flags.ca === undefined ? 'GRPC_CLIENT_TLS_CACERT' : '--ca') }),
      ...(cert === undefined
        ? {}
        : { cert: readFile(cert, flags.cert === undefined ? 'GRPC_SERVER_TLS_CERT' : '--cert') }),
      ...(key === undefined
        ? {}
        : { key: readFile(key, flags.key === undefined ? 'GRPC_SERVER_TLS_KEY' : '--key') }),
      ...(serverName === undefined ? {} : { serverName }),
    },
  };
}

/** The host of `host:port`, `[v6]:port` or a bare host, without brackets. */
function hostOf(address: string): string {
  const bracketed = /^\[([^\]]+)\]/.exec(address);
  if (bracketed) return bracketed[1] ?? '';
  const colon = address.lastIndexOf(':');
  return colon > 0 && address.indexOf(':') === colon ? address.slice(0, colon) : address;
}

/** A file the call needs, or an error that names it and the flag (or setting) behind it. */
function readFile(path: string, flag: string): Buffer {
  try {
    return readFileSync(path);
  } catch (error) {
    throw new CommandError(`${flag}: cannot read ${path}: ${(error as Error).message}`);
  }
}

function showStatus(status: DescriptorStatus): string {
  const limit = status.currentLimit;
  if (limit === undefined) {
    return `${status.code}, ${status.limitRemaining === UNLIMITED_REMAINING ? 'unlimited' : 'no limit'}`;
  }
  // A window that is no whole unit reports unit UNKNOWN and carries `window=30s` in the name.
  const per = limit.unit === 'unknown' ? '' : ` per ${limit.unit}`;
  const name = limit.name === '' ? '' : ` (${JSON.stringify(limit.name)})`;
  const reset =
    status.durationUntilResetMs === undefined
      ? ', no reset time'
      : `, resets in ${status.durationUntilResetMs / 1000}s`;
  return (
    `${status.code}, limit ${limit.requestsPerUnit}${per}${name}, ` +
    `${status.limitRemaining} remaining${reset}`
  );
}

/**
 * A call that failed to reach tollgate or to get an answer, said with the address and what
 * failed. grpc-js's text is kept, without its noise: an empty `Resolution note:` tail and the
 * `No connection established. Last error: Error:` before the reason. Other errors pass as they are.
 */
function failedCall(address: string, error: unknown): unknown {
  const grpcCode = (error as { grpcCode?: unknown }).grpcCode;
  if (grpcCode === 'DEADLINE_EXCEEDED') {
    return new CommandError(`tollgate at ${address} did not answer within ${DEADLINE_MS / 1000}s`);
  }
  if (grpcCode !== 'UNAVAILABLE' || !(error instanceof Error)) return error;
  const details = (error.cause as { details?: unknown } | undefined)?.details;
  const raw = typeof details === 'string' ? details : error.message;
  const text = raw
    .replace(/\s*Resolution note:\s*$/, '')
    .replace(/^No connection established\. Last error: (Error: )?/, '')
    .replace(/\.$/, '');
  // grpc-js's own words when nothing answered; otherwise tollgate answered UNAVAILABLE itself
  // (`store unavailable: ...` under FAILURE_MODE=error).
  const reached = !/^(No connection established|Name resolution failed|Connection dropped)/.test(
    raw,
  );
  const reason = text.charAt(0).toLowerCase() + text.slice(1);
  return new CommandError(
    reached
      ? `tollgate at ${address} answered UNAVAILABLE: ${text}`
      : `cannot reach tollgate at ${address}: ${reason}`,
  );
}
