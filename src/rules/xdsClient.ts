/**
 * The rules from an xDS management server (CONFIG_TYPE=GRPC_XDS_SOTW), as Envoy Gateway serves
 * them to envoyproxy/ratelimit: one aggregated (ADS), state-of-the-world stream that subscribes to
 * every RateLimitConfig.
 *
 * - The first request of each stream carries the node: its id and metadata.
 * - Each response is the whole rule set. It loads off the serving thread, like a file reload;
 *   applied, it is ACKed with its version; refused, it is NACKed with the previous version and the
 *   reason in `error_detail`, and the rules in force stay.
 * - Responses apply one at a time, in order. One that arrives while another loads waits, and a
 *   later one replaces it: state of the world, only the latest matters.
 * - A lost stream is opened again: every CONFIG_GRPC_XDS_SERVER_CONNECT_RETRY_INTERVAL until a
 *   first response has arrived, then with backoff from XDS_CLIENT_BACKOFF_INITIAL_INTERVAL,
 *   doubling up to XDS_CLIENT_BACKOFF_MAX_INTERVAL. The rules in force keep serving meanwhile.
 */
import { createHash } from 'node:crypto';
import { readFileSync } from 'node:fs';
import * as grpc from '@grpc/grpc-js';
import * as protoLoader from '@grpc/proto-loader';
import { loaderOptions } from '../core/protos.js';
import type { XdsSettings } from './xdsSettings.js';
import type { RulesInput } from './rulesInput.js';
import type { RuleSet } from './types.js';
import { RATE_LIMIT_CONFIG_TYPE, type XdsResource } from './xdsRules.js';

/** gRPC's own default, which the reference keeps unless XDS_CLIENT_MAX_MSG_SIZE_IN_BYTES is set. */
const DEFAULT_MAX_MESSAGE_BYTES = 4 * 1024 * 1024;
/** google.rpc.Code.INVALID_ARGUMENT, the code of a NACK's error_detail. */
const INVALID_ARGUMENT = 3;
/**
 * A management server may answer a NACK by sending the same resources again at once (go-control-
 * plane's cache does). The same refused update is not loaded again, and its NACK waits this long,
 * so that the two do not spin.
 */
const REPEAT_NACK_DELAY_MS = 1_000;
/**
 * The least time between the end of one load and the start of the next. It doubles, from the
 * first to the last, with each update that arrives before the gap has passed, and is back to the
 * first once one arrives after it: a server that sends update after update gets fewer loads the
 * longer it goes on.
 */
const LOAD_GAP_MS = { first: 100, last: 1_000 } as const;
/** Refused contents remembered, so that none of them is loaded again while it is. */
const REFUSED_REMEMBERED = 16;
/** A NACK's reason is cut to this many characters: the server's messages are bounded too. */
const MAX_NACK_MESSAGE = 4_096;

/** What identifies an update's content: its type and every resource's bytes. */
function fingerprint(response: DiscoveryResponse): string {
  const hash = createHash('sha256').update(response.type_url ?? '');
  for (const resource of response.resources ?? []) {
    hash.update(`\0${resource.type_url ?? ''}\0${resource.value?.length ?? 0}\0`);
    if (resource.value) hash.update(resource.value);
  }
  return hash.digest('hex');
}

export interface XdsClientOptions {
  settings: XdsSettings;
  /** tollgate's version, sent as the node's user agent version. */
  version: string;
  /** Loads one update's rules (off the serving thread); rejects with why they are refused. */
  load: (source: RulesInput) => Promise<RuleSet>;
  onApplied: (rules: RuleSet, version: string) => void;
  onRejected: (error: Error, version: string) => void;
  /** A stream opened (connected) or was lost, with why. */
  onStream?: (event: { connected: boolean; error?: Error; retryInMs?: number }) => void;
}

export interface XdsClient {
  /** The version of the rules in force; undefined before the first. */
  readonly version: string | undefined;
  close(): void;
}

interface DiscoveryResponse {
  version_info?: string;
  resources?: XdsResource[];
  type_url?: string;
  nonce?: string;
}

type AdsStream = grpc.ClientDuplexStream<object, Buffer>;

/**
 * The ADS client, whose responses arrive as their bytes: they are decoded only when one is about
 * to load, so that a flood of updates costs a copy of each, not a decoding (see `pending`).
 */
let ads:
  | { Client: grpc.ServiceClientConstructor; decode: (bytes: Buffer) => DiscoveryResponse }
  | undefined;
function adsClient(): NonNullable<typeof ads> {
  if (ads === undefined) {
    const definition = protoLoader.loadSync('envoy/service/discovery/v3/ads.proto', loaderOptions);
    const service = definition['envoy.service.discovery.v3.AggregatedDiscoveryService'] as
      protoLoader.ServiceDefinition | undefined;
    const method = service?.StreamAggregatedResources;
    if (method === undefined) throw new Error('ads.proto has no StreamAggregatedResources');
    const raw = { ...method, responseDeserialize: (bytes: Buffer) => bytes };
    ads = {
      Client: grpc.makeGenericClientConstructor(
        { StreamAggregatedResources: raw } as unknown as grpc.ServiceDefinition,
        'AggregatedDiscoveryService',
      ),
      decode: (bytes) => method.responseDeserialize(bytes) as DiscoveryResponse,
    };
  }
  return ads;
}

function credentialsOf(settings: XdsSettings): grpc.ChannelCredentials {
  const tls = settings.tls;
  if (tls === undefined) return grpc.credentials.createInsecure();
  const read = (path: string | undefined) => (path ? readFileSync(path) : null);
  return grpc.credentials.createSsl(read(tls.caPath), read(tls.keyPath), read(tls.certPath));
}

/** The node's metadata as a google.protobuf.Struct of strings. */
function metadataStruct(metadata: Record<string, string>) {
  const fields: Record<string, { stringValue: string }> = {};
  for (const [key, value] of Object.entries(metadata)) {
    Object.defineProperty(fields, key, { value: { stringValue: value }, enumerable: true });
  }
  return { fields };
}

function channelOptionsOf(settings: XdsSettings): grpc.ChannelOptions {
  return {
    'grpc.max_receive_message_length': settings.maxMessageBytes ?? DEFAULT_MAX_MESSAGE_BYTES,
    // A silent connection is found within a minute, not at the kernel's leisure.
    'grpc.keepalive_time_ms': 30_000,
    'grpc.keepalive_timeout_ms': 10_000,
    ...(settings.tls?.san ? { 'grpc.ssl_target_name_override': settings.tls.san } : {}),
  };
}

/** The node this client speaks for, sent in the first request of each stream. */
function nodeOf(settings: XdsSettings, version: string) {
  return {
    id: settings.nodeId,
    metadata: metadataStruct(settings.nodeMetadata),
    user_agent_name: 'tollgate',
    user_agent_version: version,
  };
}

type XdsNode = ReturnType<typeof nodeOf>;

/** What the parts of one client share. */
interface XdsState {
  closed: boolean;
  /** The version of the rules in force; undefined before the first. */
  applied: string | undefined;
  /** The stream open now: only its responses are loaded and answered. */
  stream: AdsStream | undefined;
  /** The timer that opens a lost stream again. */
  retry: NodeJS.Timeout | undefined;
}

/** A stream's first request: the node, and the version in force (empty before the first). */
function subscribeRequest(node: XdsNode, applied: string | undefined) {
  return {
    version_info: applied ?? '',
    node,
    resource_names: [],
    type_url: RATE_LIMIT_CONFIG_TYPE,
    response_nonce: '',
  };
}

/**
 * The answer to a response: its ACK, with its version; or, given why it was refused, its NACK,
 * with the version still in force and the reason.
 */
function answerRequest(response: DiscoveryResponse, applied: string | undefined, error?: Error) {
  return {
    version_info: error ? (applied ?? '') : (response.version_info ?? ''),
    resource_names: [],
    type_url: RATE_LIMIT_CONFIG_TYPE,
    response_nonce: response.nonce ?? '',
    ...(error
      ? {
          error_detail: {
            code: INVALID_ARGUMENT,
            message: error.message.slice(0, MAX_NACK_MESSAGE),
          },
        }
      : {}),
  };
}

/** Answers on the stream the response came on, unless that one is gone or the client closed. */
function answer(
  state: Readonly<XdsState>,
  on: AdsStream,
  response: DiscoveryResponse,
  error?: Error,
): void {
  if (on !== state.stream || state.closed) return;
  on.write(answerRequest(response, state.applied, error));
}

/**
 * The wait before a lost stream opens again: the connect retry interval until any stream has had
 * a response; from then on, the backoff, doubling with each loss since the last first response.
 */
function createReconnectBackoff(settings: Pick<XdsSettings, 'connectRetryIntervalMs' | 'backoff'>) {
  /** Whether any stream has had a response: from then on, reconnections back off. */
  let everAnswered = false;
  let failures = 0;
  return {
    /** A stream had its first response. */
    answered(): void {
      everAnswered = true;
      failures = 0;
    },
    nextDelay(): number {
      if (!everAnswered) return settings.connectRetryIntervalMs;
      const { initialMs, maxMs, randomFactor, jitter } = settings.backoff;
      const base = Math.min(maxMs, initialMs * 2 ** Math.min(failures, 30));
      failures += 1;
      if (!jitter) return base;
      return Math.max(1, Math.round(base * (1 + randomFactor * (2 * Math.random() - 1))));
    },
  };
}

/** A response waiting to load, still as its bytes, and the stream it came on. */
interface PendingUpdate {
  stream: AdsStream;
  bytes: Buffer;
}

/** What one stream needs from the rest of the client. */
interface StreamContext {
  client: grpc.Client;
  headers: Record<string, string>;
  node: XdsNode;
  state: XdsState;
  backoff: ReturnType<typeof createReconnectBackoff>;
  events: Pick<XdsClientOptions, 'onStream'>;
  onResponse: (update: PendingUpdate) => void;
}

/** Opens the stream and subscribes; when it is lost, opens the next after the backoff's delay. */
function openStream(context: StreamContext): void {
  const { state, backoff, events } = context;
  state.retry = undefined;
  if (state.closed) return;
  const metadata = new grpc.Metadata();
  for (const [key, value] of Object.entries(context.headers)) {
    metadata.set(key.toLowerCase(), value);
  }
  const call = (
    context.client as unknown as { StreamAggregatedResources(m: grpc.Metadata): AdsStream }
  ).StreamAggregatedResources(metadata);
  state.stream = call;
  let answered = false;
  call.on('data', (bytes: Buffer) => {
    if (call !== state.stream) return;
    if (!answered) {
      answered = true;
      backoff.answered();
      events.onStream?.({ connected: true });
    }
    context.onResponse({ stream: call, bytes });
  });
  let ended = false;
  const lost = (error?: Error) => {
    if (ended) return;
    ended = true;
    if (call !== state.stream || state.closed) return;
    state.stream = undefined;
    const delay = backoff.nextDelay();
    events.onStream?.({
      connected: false,
      error: error ?? new Error('the management server ended the stream'),
      retryInMs: delay,
    });
    state.retry = setTimeout(() => openStream(context), delay);
    state.retry.unref();
  };
  call.on('error', (error: Error) => lost(error));
  call.on('end', () => lost());
  call.write(subscribeRequest(context.node, state.applied));
}

/** The contents refused lately, and the timer of the NACK that answers one sent again. */
interface Refusals {
  /**
   * The last REFUSED_REMEMBERED contents refused, by fingerprint, oldest first, and why: any of
   * them again is refused without loading, even when a server alternates between several.
   */
  reasons: Map<string, Error>;
  repeatTimer: NodeJS.Timeout | undefined;
}

function rememberRefusal(refusals: Refusals, print: string, reason: Error): void {
  const { reasons } = refusals;
  reasons.set(print, reason);
  if (reasons.size > REFUSED_REMEMBERED) reasons.delete(reasons.keys().next().value as string);
}

/** Loads a response's rules; throws, or rejects, with why they are refused. */
function loadResponse(
  load: XdsClientOptions['load'],
  response: DiscoveryResponse,
  version: string,
): Promise<RuleSet> {
  if (response.type_url !== RATE_LIMIT_CONFIG_TYPE) {
    throw new Error(
      `type '${response.type_url ?? ''}' is not ${RATE_LIMIT_CONFIG_TYPE}, the only one asked for`,
    );
  }
  return load({ kind: 'xds', version, resources: response.resources ?? [] });
}

/** What handling an update needs from the rest of the client. */
interface UpdateContext {
  decode: (bytes: Buffer) => DiscoveryResponse;
  options: Pick<XdsClientOptions, 'load' | 'onApplied' | 'onRejected'>;
  state: XdsState;
  refusals: Refusals;
}

/** Decodes one response and loads it, or answers it from memory when it was refused before. */
async function handleUpdate(context: UpdateContext, update: PendingUpdate): Promise<void> {
  const { options, state, refusals } = context;
  const { stream: from, bytes } = update;
  let response: DiscoveryResponse;
  try {
    response = context.decode(bytes);
  } catch (error) {
    const reason = new Error(`not a DiscoveryResponse: ${(error as Error).message}`);
    options.onRejected(reason, '');
    answer(state, from, {}, reason);
    return;
  }
  const version = response.version_info ?? '';
  const print = fingerprint(response);
  clearTimeout(refusals.repeatTimer);
  const refusal = refusals.reasons.get(print);
  if (refusal !== undefined) {
    refusals.repeatTimer = setTimeout(
      () => answer(state, from, response, refusal),
      REPEAT_NACK_DELAY_MS,
    );
    refusals.repeatTimer.unref();
    return;
  }
  try {
    const rules = await loadResponse(options.load, response, version);
    if (state.closed) return;
    state.applied = version;
    options.onApplied(rules, version);
    answer(state, from, response);
  } catch (error) {
    if (state.closed) return;
    const reason = error instanceof Error ? error : new Error(String(error));
    rememberRefusal(refusals, print, reason);
    options.onRejected(reason, version);
    answer(state, from, response, reason);
  }
}

/**
 * The update waiting to load, and the pace of loads. One that arrives while another waits
 * replaces it undecoded: state of the world, only the latest matters.
 */
interface LoadQueue {
  pending: PendingUpdate | undefined;
  /** Whether the load loop runs: updates load one at a time. */
  loading: boolean;
  gapMs: number;
  lastLoadEnded: number;
}

function createLoadQueue(): LoadQueue {
  return { pending: undefined, loading: false, gapMs: LOAD_GAP_MS.first, lastLoadEnded: -Infinity };
}

/**
 * Loads the pending update, then any that arrived meanwhile, until none waits or the client
 * closes. Only this loop takes the pending update away; others only replace it, so after the gap's
 * sleep one still waits, perhaps a newer one, and only a close ends the loop there.
 */
async function loadPending(
  queue: LoadQueue,
  state: Readonly<XdsState>,
  handle: (update: PendingUpdate) => Promise<void>,
): Promise<void> {
  if (queue.loading) return;
  queue.loading = true;
  while (queue.pending !== undefined && !state.closed) {
    // Loading never takes much of the serving thread's time, nor of the loader's core, from
    // calls: the next response waits out the gap.
    const waitMs = queue.lastLoadEnded + queue.gapMs - performance.now();
    if (waitMs > 0) {
      await new Promise((resolve) => setTimeout(resolve, waitMs));
      queue.gapMs = Math.min(queue.gapMs * 2, LOAD_GAP_MS.last);
      if (state.closed) break;
    } else {
      queue.gapMs = LOAD_GAP_MS.first;
    }
    const update = queue.pending;
    queue.pending = undefined;
    await handle(update);
    queue.lastLoadEnded = performance.now();
  }
  queue.loading = false;
}

export function startXdsClient(options: XdsClientOptions): XdsClient {
  const { settings } = options;
  const { Client, decode } = adsClient();
  const client = new Client(
    settings.serverUrl,
    credentialsOf(settings),
    channelOptionsOf(settings),
  );
  const state: XdsState = {
    closed: false,
    applied: undefined,
    stream: undefined,
    retry: undefined,
  };
  const refusals: Refusals = { reasons: new Map(), repeatTimer: undefined };
  const queue = createLoadQueue();
  const handle = (update: PendingUpdate) =>
    handleUpdate({ decode, options, state, refusals }, update);

  openStream({
    client,
    headers: settings.additionalHeaders,
    node: nodeOf(settings, options.version),
    state,
    backoff: createReconnectBackoff(settings),
    events: options,
    onResponse: (update) => {
      queue.pending = update;
      void loadPending(queue, state, handle);
    },
  });
  return {
    get version() {
      return state.applied;
    },
    close() {
      state.closed = true;
      clearTimeout(state.retry);
      clearTimeout(refusals.repeatTimer);
      state.stream?.cancel();
      state.stream = undefined;
      client.close();
    },
  };
}
