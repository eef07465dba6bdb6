/** How a descriptor's cost and limit are resolved, and how a limit is reported back. */
import type { CurrentLimit, Descriptor, LimitOverride } from '../core/check.js';
import { formatDuration } from '../core/duration.js';
import { InvalidRequestError } from '../core/errors.js';
import { checkTokenBucketExact } from '../rules/tokenBucket.js';
import { UNIT_SECONDS, type Algorithm, type Limit } from '../rules/types.js';
import { COST_CAP } from '../store/Store.js';

const BIG_COST_CAP = BigInt(COST_CAP);

/** The descriptor's own cost wins over the request's; the request's 0 means 1. */
export function costOf(descriptor: Descriptor, requestHits: number): number {
  const own = descriptor.hitsAddend;
  if (own === undefined) return requestHits === 0 ? 1 : requestHits;
  // Anything above every possible limit is the same to the store: it can never fit.
  return own >= BIG_COST_CAP ? COST_CAP : Number(own);
}

export function overrideLimit(
  override: LimitOverride,
  rule: Limit | undefined,
  defaultAlgorithm: Algorithm,
  index: number,
): Limit {
  const windowMs = UNIT_SECONDS[override.unit] * 1000;
  const algorithm = rule?.algorithm ?? defaultAlgorithm;
  const limit = override.requestsPerUnit;
  if (algorithm === 'token_bucket') {
    const reason = checkTokenBucketExact(limit, windowMs, limit);
    if (reason !== undefined)
      throw new InvalidRequestError(`descriptors[${index}].limit: ${reason}`);
  }
  return {
    requestsPerUnit: limit,
    unit: override.unit,
    windowMs,
    algorithm,
    burst: limit,
    name: rule?.name ?? '',
    overdraw: false,
  };
}

export function describeLimit(limit: Limit): CurrentLimit {
  if (limit.unit !== undefined) {
    return { requestsPerUnit: limit.requestsPerUnit, unit: limit.unit, name: limit.name };
  }
  // Envoy's unit enum cannot say "30 seconds": the exact window travels in the name.
  const window = `window=${formatDuration(limit.windowMs)}`;
  return {
    requestsPerUnit: limit.requestsPerUnit,
    unit: 'unknown',
    name: limit.name === '' ? window : `${limit.name}, ${window}`,
  };
}
