/**
 * POST /json's answer: a Decision as a RateLimitResponse in proto3 JSON, printed as protojson
 * prints it (and so as the reference service answers): lowerCamelCase names, enums by name,
 * Durations as strings such as "1.500s", and fields at their default value left out, so a
 * `limitRemaining` of 0 is absent.
 */
import type { Code, CurrentLimit, Decision, DescriptorStatus } from '../../core/check.js';
import type { JsonValue } from '../../rules/types.js';

const UINT32_MAX = 0xffffffff;
const CODES: ReadonlySet<string> = new Set<Code>(['OK', 'OVER_LIMIT']);

/** The response as a JSON value. Throws on a code that is not OK or OVER_LIMIT. */
export function toJsonResponse(decision: Decision): { [key: string]: JsonValue } {
  const json: { [key: string]: JsonValue } = { overallCode: code(decision.code) };
  if (decision.statuses.length > 0) json.statuses = decision.statuses.map(toJsonStatus);
  const headers = (decision.headers ?? []).map((header) =>
    omitDefaults({ key: header.key, value: header.value }),
  );
  if (headers.length > 0) json.responseHeadersToAdd = headers;
  // A google.protobuf.Struct is its plain JSON object.
  if (decision.dynamicMetadata !== undefined) json.dynamicMetadata = decision.dynamicMetadata;
  return json;
}

function toJsonStatus(status: DescriptorStatus): JsonValue {
  return omitDefaults({
    code: code(status.code),
    currentLimit: status.currentLimit && toJsonLimit(status.currentLimit),
    limitRemaining: clampUint32(status.limitRemaining),
    durationUntilReset:
      status.durationUntilResetMs === undefined ? undefined : duration(status.durationUntilResetMs),
  });
}

function toJsonLimit(limit: CurrentLimit): JsonValue {
  return omitDefaults({
    requestsPerUnit: clampUint32(limit.requestsPerUnit),
    unit: limit.unit === 'unknown' ? undefined : limit.unit.toUpperCase(),
    name: limit.name,
  });
}

/** proto3 JSON leaves out scalars at their default; a message that is set stays, even if empty. */
function omitDefaults(fields: Record<string, JsonValue | undefined>): JsonValue {
  const json: { [key: string]: JsonValue } = {};
  for (const [name, value] of Object.entries(fields)) {
    if (value !== undefined && value !== 0 && value !== '') json[name] = value;
  }
  return json;
}

function code(value: string): string {
  if (!CODES.has(value)) throw new Error(`cannot encode decision code ${value}`);
  return value;
}

function clampUint32(value: number): number {
  return Math.min(Math.max(Math.trunc(value), 0), UINT32_MAX);
}

/** A google.protobuf.Duration in JSON, in whole milliseconds rounded up: "2s", "1.500s". */
function duration(ms: number): string {
  const whole = Math.max(0, Math.ceil(ms));
  const seconds = Math.floor(whole / 1000);
  const millis = whole % 1000;
  return millis === 0 ? `${seconds}s` : `${seconds}.${String(millis).padStart(3, '0')}s`;
}
