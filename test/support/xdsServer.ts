import { spawn, spawnSync, type ChildProcess } from 'node:child_process';
import { createInterface } from 'node:readline';
import { fileURLToPath } from 'node:url';
import { freePort } from './ports.js';

/**
 * An xDS management server for tests of tollgate's xDS client: the Go program in
 * test/xds/server (go-control-plane's snapshot cache, state of the world over ADS), serving
 * RateLimitConfig resources. Tests push rule versions with `set` and watch what the client asks
 * for and whether it ACKs or NACKs in `events`, which is everything the server has reported.
 */
export interface XdsServer {
  port: number;
  /** `127.0.0.1:PORT`, for tollgate's xDS server address. */
  address: string;
  /** Everything the server has reported so far, oldest first. */
  events: XdsEvent[];
  child: ChildProcess;
  /** Everything it wrote to standard error, for failure messages. */
  stderr(): string;
  /**
   * Serves these RateLimitConfigs (protojson form, `snake_case` or `camelCase` field names) to
   * the node of this id, as version `version`; resource names are the configs' `name`s. Rejects
   * with the server's message when a config is not a valid RateLimitConfig.
   */
  set(node: string, version: string, configs: object[]): Promise<void>;
  /** Forgets the node's snapshot: its open watches get no answer until the next `set`. */
  clear(node: string): Promise<void>;
  /** The first event, past or future, that matches; rejects past `timeoutMs`. */
  waitFor(predicate: (event: XdsEvent) => boolean, timeoutMs?: number): Promise<XdsEvent>;
  /** SIGTERM, then SIGKILL if it has not exited 5 s later. */
  stop(): Promise<void>;
  /** SIGKILL, as a crash would; resolves once it has exited. */
  kill(): Promise<void>;
}

export interface XdsServerOptions {
  /** The port on 127.0.0.1; by default a free one. */
  port?: number;
  /**
   * Serve TLS with this certificate; with `clientCaPath`, require client certificates signed by
   * it; from TLS `minVersion` on (1.2 by default).
   */
  tls?: { certPath: string; keyPath: string; clientCaPath?: string; minVersion?: '1.2' | '1.3' };
}

export const RATE_LIMIT_CONFIG_TYPE =
  'type.googleapis.com/ratelimit.config.ratelimit.v3.RateLimitConfig';

/** gRPC metadata: each key with its values. */
export type XdsMetadata = Record<string, string[]>;

/** The server's events, one JSON object per line of its standard output. */
export type XdsEvent =
  | { event: 'listening'; port: number }
  /** Replies to the commands, one per command, in order. */
  | { event: 'set'; node: string; version: string }
  | { event: 'cleared'; node: string }
  | { event: 'error'; op: string; node?: string; version?: string; message: string }
  /**
   * A gRPC stream began (from an interceptor: before `stream-open`, without its id). Over TLS,
   * `tls` has the version ('TLS 1.3') and the verified client certificate's serial number
   * (upper-case hex, '' when none was sent).
   */
  | {
      event: 'stream-metadata';
      method: string;
      metadata: XdsMetadata;
      tls?: { version: string; clientSerial: string };
    }
  /** typeUrl is '' on ADS streams. */
  | { event: 'stream-open'; stream: number; typeUrl: string; metadata: XdsMetadata }
  | { event: 'stream-closed'; stream: number; node: string }
  | XdsRequestEvent
  | {
      event: 'response';
      stream: number;
      typeUrl: string;
      version: string;
      nonce: string;
      /** How many resources it carries. */
      resources: number;
    };

/** A DiscoveryRequest received. */
export interface XdsRequestEvent {
  event: 'request';
  stream: number;
  /** initial: no response_nonce; ack: a nonce and no error_detail; nack: error_detail set. */
  kind: 'initial' | 'ack' | 'nack';
  node: string;
  /** The node's metadata (a google.protobuf.Struct) as JSON, or null. */
  nodeMetadata: Record<string, unknown> | null;
  typeUrl: string;
  versionInfo: string;
  responseNonce: string;
  resourceNames: string[];
  errorDetail: { code: number; message: string } | null;
}

export const isRequest = (event: XdsEvent): event is XdsRequestEvent => event.event === 'request';

/** Matches the request that ACKs `version`. */
export const acked = (version: string) => (event: XdsEvent) =>
  isRequest(event) && event.kind === 'ack' && event.versionInfo === version;

/**
 * tollgate's settings for this server's `node`, with retries quick enough for tests: a stream
 * that is lost or refused is opened again within half a second.
 */
export function xdsEnv(
  server: { address: string },
  node: string,
  extra: Record<string, string> = {},
): Record<string, string> {
  return {
    CONFIG_TYPE: 'GRPC_XDS_SOTW',
    CONFIG_GRPC_XDS_SERVER_URL: server.address,
    CONFIG_GRPC_XDS_NODE_ID: node,
    CONFIG_GRPC_XDS_SERVER_CONNECT_RETRY_INTERVAL: '100ms',
    XDS_CLIENT_BACKOFF_INITIAL_INTERVAL: '100ms',
    XDS_CLIENT_BACKOFF_MAX_INTERVAL: '400ms',
    ...extra,
  };
}

const root = fileURLToPath(new URL('../..', import.meta.url));
let binary: string | undefined;

/**
 * Builds the server once per version of its sources (`scripts/xds-server.mjs`) and returns the
 * binary's path. The first build fetches Go modules: call it from a hook with a long timeout.
 */
export function buildXdsServer(): string {
  if (binary) return binary;
  const build = spawnSync(process.execPath, ['scripts/xds-server.mjs', '--print-binary'], {
    cwd: root,
    encoding: 'utf8',
  });
  if (build.error || build.status !== 0) {
    throw new Error(`building the xDS server failed: ${build.error ?? build.stderr}`);
  }
  binary = build.stdout.trim();
  return binary;
}

// Servers still running when the test process ends (a test that crashed or forgot to stop
// them) are killed with it.
const running = new Set<ChildProcess>();
let reaperInstalled = false;

function track(child: ChildProcess): void {
  running.add(child);
  child.once('exit', () => running.delete(child));
  if (!reaperInstalled) {
    reaperInstalled = true;
    process.once('exit', () => {
      for (const left of running) left.kill('SIGKILL');
    });
  }
}

class PortTaken extends Error {}

export async function startXdsServer(options: XdsServerOptions = {}): Promise<XdsServer> {
  const path = buildXdsServer();
  // A free port may be taken by another suite before the server binds it: then try another.
  for (let attempt = 1; ; attempt++) {
    try {
      return await launch(path, options.port ?? (await freePort()), options);
    } catch (error) {
      if (!(error instanceof PortTaken) || options.port !== undefined || attempt >= 5) throw error;
    }
  }
}

function exited(child: ChildProcess): boolean {
  return child.exitCode !== null || child.signalCode !== null;
}

function tail(text: string, lines = 20): string {
  return text.trimEnd().split('\n').slice(-lines).join('\n');
}

interface Waiter {
  predicate: (event: XdsEvent) => boolean;
  resolve: (event: XdsEvent) => void;
  reject: (error: Error) => void;
}

async function launch(path: string, port: number, options: XdsServerOptions): Promise<XdsServer> {
  const args = ['-port', String(port)];
  if (options.tls) {
    args.push('-tls-cert', options.tls.certPath, '-tls-key', options.tls.keyPath);
    if (options.tls.clientCaPath) args.push('-client-ca', options.tls.clientCaPath);
    if (options.tls.minVersion) args.push('-tls-min', options.tls.minVersion);
  }
  const child = spawn(path, args, { stdio: ['pipe', 'pipe', 'pipe'] });
  track(child);
  let stderr = '';
  child.stderr?.on('data', (chunk: Buffer) => (stderr += chunk.toString()));
  // Writing to a server that has died fails with EPIPE; its exit is reported instead.
  child.stdin?.on('error', () => {});

  const events: XdsEvent[] = [];
  const waiters = new Set<Waiter>();
  // The commands sent and not answered yet: the server answers each, in order.
  const replies: Waiter[] = [];
  const lastEvents = () =>
    events
      .slice(-15)
      .map((event) => JSON.stringify(event))
      .join('\n');

  createInterface({ input: child.stdout! }).on('line', (line) => {
    let event: XdsEvent;
    try {
      event = JSON.parse(line) as XdsEvent;
    } catch {
      stderr += `(not an event on stdout) ${line}\n`;
      return;
    }
    events.push(event);
    if (event.event === 'set' || event.event === 'cleared' || event.event === 'error') {
      const reply = replies.shift();
      if (reply && reply.predicate(event)) reply.resolve(event);
      else if (reply && event.event === 'error') {
        reply.reject(new Error(`xDS server: ${event.op} failed: ${event.message}`));
      } else if (reply) reply.reject(new Error(`xDS server: unexpected ${JSON.stringify(event)}`));
    }
    for (const waiter of waiters) {
      if (waiter.predicate(event)) {
        waiters.delete(waiter);
        waiter.resolve(event);
      }
    }
  });
  // 'close', not 'exit': by then every line it wrote has been read.
  let closed = false;
  const gone = new Promise<void>((resolve) => child.once('close', () => resolve()));
  child.once('close', (code, signal) => {
    closed = true;
    const error = () =>
      new Error(
        `xDS server exited (${signal ?? code}) ${tail(stderr)}\nlast events:\n${lastEvents()}`,
      );
    for (const reply of replies.splice(0)) reply.reject(error());
    for (const waiter of waiters) waiter.reject(error());
    waiters.clear();
  });

  const waitFor = (predicate: (event: XdsEvent) => boolean, timeoutMs = 10_000) => {
    const past = events.find(predicate);
    if (past) return Promise.resolve(past);
    if (closed) return Promise.reject(new Error(`xDS server has exited: ${tail(stderr)}`));
    return new Promise<XdsEvent>((resolve, reject) => {
      const waiter: Waiter = {
        predicate,
        resolve: (event) => {
          clearTimeout(timer);
          resolve(event);
        },
        reject: (error) => {
          clearTimeout(timer);
          reject(error);
        },
      };
      const timer = setTimeout(() => {
        waiters.delete(waiter);
        reject(
          new Error(`no matching xDS event in ${timeoutMs} ms; last events:\n${lastEvents()}`),
        );
      }, timeoutMs);
      waiters.add(waiter);
    });
  };

  const send = (command: object, expected: XdsEvent['event']) =>
    new Promise<void>((resolve, reject) => {
      if (closed) return reject(new Error(`xDS server has exited: ${tail(stderr)}`));
      replies.push({
        predicate: (event) => event.event === expected,
        resolve: () => resolve(),
        reject,
      });
      child.stdin!.write(`${JSON.stringify(command)}\n`);
    });

  const stopWith = async (signal: NodeJS.Signals) => {
    if (!exited(child)) child.kill(signal);
    const force = signal === 'SIGKILL' ? undefined : setTimeout(() => child.kill('SIGKILL'), 5_000);
    await gone;
    clearTimeout(force);
  };

  // Listening, or exited (a port clash, bad flags), or hung.
  const started = await waitFor((event) => event.event === 'listening', 30_000).then(
    () => undefined,
    () => (closed ? 'exited before listening' : 'did not report listening in 30 s'),
  );
  if (started !== undefined) {
    await stopWith('SIGKILL');
    const message = `xDS server on 127.0.0.1:${port} ${started}: ${tail(stderr)}`;
    if (/address already in use/.test(stderr)) throw new PortTaken(message);
    throw new Error(message);
  }

  return {
    port,
    address: `127.0.0.1:${port}`,
    events,
    child,
    stderr: () => stderr,
    set: (node, version, configs) => send({ op: 'set', node, version, configs }, 'set'),
    clear: (node) => send({ op: 'clear', node }, 'cleared'),
    waitFor,
    stop: () => stopWith('SIGTERM'),
    kill: () => stopWith('SIGKILL'),
  };
}
