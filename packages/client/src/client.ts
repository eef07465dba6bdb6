/**
 * A typed client for services that ask tollgate directly, without Envoy in front. It answers with
 * a decision, never a gRPC error for an over-limit request; when tollgate cannot be reached in
 * time it answers as `whenUnavailable` says, like Envoy's `failure_mode_deny`.
 */
import {
  credentials,
  Metadata,
  status,
  type ChannelCredentials,
  type ChannelOptions,
  type ServiceError,
} from '@grpc/grpc-js';
import { TollgateError, TollgateRequestError, TollgateUnavailableError } from './errors.js';
import {
  createRateLimitClient,
  type RateLimitRequestObject,
  type RateLimitResponseObject,
} from './rls.js';
import type { Code, DescriptorStatus, Header, ReportedUnit } from './types.js';

export interface TollgateClientOptions {
  /** `host:port`, or any grpc-js target such as `unix:/run/tollgate.sock`. */
  address: string;
  /** Insecure (plaintext) unless given, or unless `tls` is. */
  credentials?: ChannelCredentials;
  /**
   * TLS without building grpc-js credentials: the CA that signed the server's certificate (the
   * system's when absent), a client certificate and key for mutual TLS, and the name the server's
   * certificate must carry when it is not the address's host. Not with `credentials`.
   */
  tls?: { ca?: Buffer; cert?: Buffer; key?: Buffer; serverName?: string };
  /** Bound on each check, connecting included. Default 50 ms. */
  deadlineMs?: number;
  /** What a check answers when tollgate is unreachable or too slow: allow, deny, or reject. */
  whenUnavailable: 'allow' | 'deny' | 'throw';
}

/**
 * A descriptor's entries, in order. A Record keeps insertion order, except that integer-like keys
 * ("1", "42") come first, as JavaScript orders them; use the tuple form for those and for a key
 * that appears twice.
 */
export type DescriptorEntries =
  Readonly<Record<string, string>> | ReadonlyArray<readonly [key: string, value: string]>;

/**
 * A descriptor with its own cost: `hitsAddend` (a whole number; 0 checks without consuming)
 * overrides the request's, and `isNegativeHits` gives that cost back to the budget instead of
 * taking it (a refund, which always answers OK).
 */
export interface DescriptorRequest {
  entries: DescriptorEntries;
  hitsAddend?: number;
  isNegativeHits?: boolean;
}

export interface CheckRequest {
  domain: string;
  /** Each descriptor as its entries, or with its own cost as a DescriptorRequest. */
  descriptors: readonly (DescriptorEntries | DescriptorRequest)[];
  /** The request's cost, a whole number; 0 or absent means 1. */
  hitsAddend?: number;
}

/** tollgate answered; `allowed` is `code === 'OK'`. */
export interface ServiceResult {
  source: 'service';
  allowed: boolean;
  code: Code;
  /** One per descriptor, in request order. */
  statuses: DescriptorStatus[];
  headers: Header[];
  /**
   * When denied: whole seconds until every over-limit descriptor has room again. Absent when
   * allowed, or when some cost can never fit, so no retry would help.
   */
  retryAfterSeconds?: number;
  error?: undefined;
}

/** tollgate did not answer; the decision is `whenUnavailable`'s, with no statuses or headers. */
export interface FallbackResult {
  source: 'fallback';
  allowed: boolean;
  code: Code;
  statuses: DescriptorStatus[];
  headers: Header[];
  retryAfterSeconds?: undefined;
  error: TollgateUnavailableError;
}

export type CheckResult = ServiceResult | FallbackResult;

export interface TollgateClient {
  /** Resolves with a decision; rejects with `TollgateRequestError` or another `TollgateError`. */
  check(request: CheckRequest): Promise<CheckResult>;
  close(): void;
}

const UINT32_MAX = 4_294_967_295;

export function createTollgateClient(options: TollgateClientOptions): TollgateClient {
  const { deadlineMs = 50, whenUnavailable } = options;
  const client = createRateLimitClient(...channelOf(options));

  function call(request: RateLimitRequestObject): Promise<RateLimitResponseObject> {
    return new Promise((resolve, reject) => {
      client.ShouldRateLimit(
        request,
        new Metadata(),
        { deadline: Date.now() + deadlineMs },
        (error, response) => (error ? reject(toTollgateError(error)) : resolve(response ?? {})),
      );
    });
  }

  return {
    async check(request) {
      const hits = wholeNumber(request.hitsAddend ?? 0, 'hitsAddend', UINT32_MAX);
      const wire = toWire(request, hits);
      try {
        return toResult(await call(wire));
      } catch (error) {
        if (!(error instanceof TollgateUnavailableError) || whenUnavailable === 'throw') {
          throw error;
        }
        const allowed = whenUnavailable === 'allow';
        const code = allowed ? 'OK' : 'OVER_LIMIT';
        return { source: 'fallback', allowed, code, statuses: [], headers: [], error };
      }
    },
    close: () => client.close(),
  };
}

/** A descriptor's own uint64 cost stays exact up to 2^53 - 1 as a JavaScript number. */
const DESCRIPTOR_HITS_MAX = Number.MAX_SAFE_INTEGER;

function wholeNumber(value: number, path: string, max: number): number {
  if (!Number.isInteger(value) || value < 0 || value > max) {
    throw new TollgateRequestError(
      `${path}: ${value} is not a whole number from 0 to ${max}`,
      'INVALID_ARGUMENT',
    );
  }
  return value;
}

function toWire(request: CheckRequest, hits: number): RateLimitRequestObject {
  return {
    domain: request.domain,
    descriptors: request.descriptors.map((descriptor, i) => {
      if (!isDescriptorRequest(descriptor)) return { entries: toEntries(descriptor) };
      const wire: NonNullable<RateLimitRequestObject['descriptors']>[number] = {
        entries: toEntries(descriptor.entries),
      };
      if (descriptor.hitsAddend !== undefined) {
        const own = wholeNumber(
          descriptor.hitsAddend,
          `descriptors[${i}].hitsAddend`,
          DESCRIPTOR_HITS_MAX,
        );
        wire.hits_addend = { value: String(own) };
      }
      if (descriptor.isNegativeHits === true) wire.is_negative_hits = true;
      return wire;
    }),
    ...(hits === 0 ? {} : { hits_addend: hits }),
  };
}

/** Entries are strings; a descriptor given with its cost has an object or a list as `entries`. */
function isDescriptorRequest(
  descriptor: DescriptorEntries | DescriptorRequest,
): descriptor is DescriptorRequest {
  return (
    !Array.isArray(descriptor) &&
    typeof (descriptor as { entries?: unknown }).entries === 'object' &&
    (descriptor as { entries?: unknown }).entries !== null
  );
}

function toEntries(entries: DescriptorEntries): { key: string; value: string }[] {
  return (Array.isArray(entries) ? entries : Object.entries(entries)).map(([key, value]) => ({
    key,
    value,
  }));
}

function toTollgateError(error: ServiceError): TollgateError {
  const name = status[error.code] ?? String(error.code);
  const options = { cause: error };
  if (error.code === status.INVALID_ARGUMENT) {
    return new TollgateRequestError(error.details, name, options);
  }
  // grpc-js reports refused, reset and unresolvable connections as UNAVAILABLE.
  if (error.code === status.UNAVAILABLE || error.code === status.DEADLINE_EXCEEDED) {
    return new TollgateUnavailableError(`tollgate unavailable: ${error.message}`, name, options);
  }
  return new TollgateError(`tollgate failed: ${error.message}`, name, options);
}

function toResult(response: RateLimitResponseObject): ServiceResult {
  const overall = response.overall_code;
  // Envoy treats an UNKNOWN overall code as a failed call, and so does this client.
  if (overall !== 'OK' && overall !== 'OVER_LIMIT') {
    throw new TollgateUnavailableError(`tollgate answered overall_code ${overall}`, 'OK');
  }
  const statuses = (response.statuses ?? []).map(toStatus);
  const headers = (response.response_headers_to_add ?? []).map((header) => ({
    key: header.key ?? '',
    value: header.value ?? '',
  }));
  const result: ServiceResult = {
    source: 'service',
    allowed: overall === 'OK',
    code: overall,
    statuses,
    headers,
  };
  if (overall === 'OVER_LIMIT') {
    const over = statuses.filter((s) => s.code === 'OVER_LIMIT');
    const waits = over.map((s) => s.durationUntilResetMs);
    if (over.length > 0 && waits.every((ms) => ms !== undefined)) {
      result.retryAfterSeconds = Math.ceil(Math.max(...(waits as number[])) / 1000);
    }
  }
  return result;
}

type WireStatus = NonNullable<RateLimitResponseObject['statuses']>[number];

function toStatus(wire: WireStatus): DescriptorStatus {
  const status: DescriptorStatus = {
    code: wire.code === 'OVER_LIMIT' ? 'OVER_LIMIT' : 'OK',
    limitRemaining: wire.limit_remaining ?? 0,
  };
  const limit = wire.current_limit;
  if (limit) {
    status.currentLimit = {
      requestsPerUnit: limit.requests_per_unit ?? 0,
      unit: (limit.unit ?? 'UNKNOWN').toLowerCase() as ReportedUnit,
      name: limit.name ?? '',
    };
  }
  const reset = wire.duration_until_reset;
  if (reset) {
    // Rounded up: a retry after this long must not come a fraction of a millisecond early.
    status.durationUntilResetMs =
      Number(reset.seconds ?? 0) * 1000 + Math.ceil((reset.nanos ?? 0) / 1e6);
  }
  return status;
}

/** The channel's address, credentials and options, from `credentials` or `tls`. */
function channelOf(
  options: TollgateClientOptions,
): [string, ChannelCredentials | undefined, ChannelOptions] {
  const { address, tls } = options;
  if (tls === undefined) return [address, options.credentials, {}];
  if (options.credentials !== undefined) {
    throw new TypeError('createTollgateClient: give credentials or tls, not both');
  }
  if ((tls.cert === undefined) !== (tls.key === undefined)) {
    throw new TypeError('createTollgateClient: tls.cert and tls.key go together');
  }
  const ssl = credentials.createSsl(tls.ca ?? null, tls.key ?? null, tls.cert ?? null);
  const channel: ChannelOptions =
    tls.serverName === undefined ? {} : { 'grpc.ssl_target_name_override': tls.serverName };
  return [address, ssl, channel];
}
