/**
 * The statsd server's address: STATSD_HOST looked up once, not for every packet.
 *
 * A name lookup (getaddrinfo) takes one of libuv's few threadpool lanes until it answers; one per
 * packet to a name whose DNS hangs fills them all, and then nothing else of the process that
 * needs one (Redis reconnecting to a host name, a file read) runs. So at most one lookup is in
 * flight, ever. The name is looked up at start; again after a lookup that failed, or a send or
 * connection that failed, after a backoff doubling from 1 s to 30 s; and every minute otherwise,
 * so that a statsd server that moved is found. While the name has never resolved there is no
 * address, and what would be sent is dropped (and counted) instead. An IP address is used as it
 * is, with no lookup.
 */
import { isIP } from 'node:net';

/** node:dns's `lookup(hostname, options, callback)`, as much of it as is used. */
export type Lookup = (
  hostname: string,
  options: { family: 0; all: false },
  callback: (error: Error | null, address: string, family: number) => void,
) => void;

export interface ResolvedAddress {
  address: string;
  family: 4 | 6;
}

export interface StatsdAddress {
  /** Where to send now; undefined while the name has not resolved. */
  current(): ResolvedAddress | undefined;
  /** A send or a connection failed: look the name up again, after the backoff. */
  failed(): void;
  /** Packets went through: the backoff starts again from 1 s. */
  worked(): void;
  close(): void;
}

export interface AddressOptions {
  host: string;
  lookup: Lookup;
  /** A lookup failed; the caller rate-limits its own reporting. */
  onError(error: Error): void;
  /** The name resolved (the first time, or to another address). */
  onResolved?(): void;
}

const FIRST_BACKOFF_MS = 1_000;
const MAX_BACKOFF_MS = 30_000;
const REFRESH_MS = 60_000;

interface State {
  readonly options: AddressOptions;
  address: ResolvedAddress | undefined;
  inFlight: boolean;
  closed: boolean;
  backoffMs: number;
  timer: NodeJS.Timeout | undefined;
  /** When the pending timer fires. */
  due: number;
}

export function createStatsdAddress(options: AddressOptions): StatsdAddress {
  const family = isIP(options.host);
  if (family === 4 || family === 6) {
    const fixed: ResolvedAddress = { address: options.host, family };
    return { current: () => fixed, failed: ignore, worked: ignore, close: ignore };
  }
  const state: State = {
    options,
    address: undefined,
    inFlight: false,
    closed: false,
    backoffMs: FIRST_BACKOFF_MS,
    timer: undefined,
    due: 0,
  };
  // Started once the caller has its transport, should a lookup answer at once.
  queueMicrotask(() => lookUp(state));
  return {
    current: () => state.address,
    failed() {
      lookUpIn(state, state.backoffMs);
      state.backoffMs = Math.min(MAX_BACKOFF_MS, state.backoffMs * 2);
    },
    worked() {
      state.backoffMs = FIRST_BACKOFF_MS;
    },
    close() {
      state.closed = true;
      clearTimeout(state.timer);
    },
  };
}

/** A lookup in `delayMs`, unless one is in flight or another is due sooner. */
function lookUpIn(state: State, delayMs: number): void {
  if (state.closed || state.inFlight) return;
  const due = Date.now() + delayMs;
  if (state.timer !== undefined && state.due <= due) return;
  clearTimeout(state.timer);
  state.due = due;
  state.timer = setTimeout(lookUp, delayMs, state);
  state.timer.unref();
}

function lookUp(state: State): void {
  state.timer = undefined;
  if (state.closed || state.inFlight) return;
  state.inFlight = true;
  const answered = (error: Error | null, address: string, family: number): void => {
    state.inFlight = false;
    if (state.closed) return;
    if (error !== null || (family !== 4 && family !== 6)) {
      state.options.onError(error ?? new Error(`statsd: ${state.options.host}: no address`));
      lookUpIn(state, state.backoffMs);
      state.backoffMs = Math.min(MAX_BACKOFF_MS, state.backoffMs * 2);
      return;
    }
    const changed = state.address?.address !== address;
    state.address = { address, family };
    if (changed) state.options.onResolved?.();
    lookUpIn(state, REFRESH_MS);
  };
  try {
    state.options.lookup(state.options.host, { family: 0, all: false }, answered);
  } catch (error) {
    answered(error instanceof Error ? error : new Error(String(error)), '', 0);
  }
}

function ignore(): void {
  // An IP address needs no lookup.
}
