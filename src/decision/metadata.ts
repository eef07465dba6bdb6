import type { Check, Descriptor, DescriptorStatus } from '../core/check.js';
import type { JsonValue, RuleNode } from '../rules/types.js';

/**
 * RESPONSE_DYNAMIC_METADATA, in the shape of the reference's main: the domain; each descriptor's
 * entries as `key=value`, with its limit override and its own cost when it has them; the request's
 * cost when it is not 0; and `metadata`, the rules' `metadata` of the descriptors that passed with
 * a rule's limit, merged deeply in request order, the first value of a key winning.
 */
export function dynamicMetadata(
  check: Check,
  nodes: readonly (RuleNode | undefined)[],
  statuses: readonly DescriptorStatus[],
): Record<string, JsonValue> {
  const fields: Record<string, JsonValue> = {
    domain: check.domain,
    descriptors: check.descriptors.map(describeDescriptor),
  };
  if (check.hitsAddend !== 0) fields.hitsAddend = check.hitsAddend;
  let merged: Record<string, JsonValue> | undefined;
  check.descriptors.forEach((descriptor, i) => {
    const status = statuses[i];
    const metadata = nodes[i]?.metadata;
    // Passed with a rule's limit: not over, not unlimited or replaced, no override.
    const passed = status?.code === 'OK' && status.currentLimit !== undefined;
    if (!passed || descriptor.limit !== undefined || metadata === undefined) return;
    merged = mergeFirstWins(merged ?? {}, metadata);
  });
  if (merged !== undefined && Object.keys(merged).length > 0) fields.metadata = merged;
  return fields;
}

const OVERRIDE_UNITS: Readonly<Record<string, string>> = {
  second: 'SECOND',
  minute: 'MINUTE',
  hour: 'HOUR',
  day: 'DAY',
  month: 'MONTH',
  year: 'YEAR',
};

function describeDescriptor(descriptor: Descriptor): JsonValue {
  const fields: Record<string, JsonValue> = {
    entries: descriptor.entries.map(({ key, value }) => `${key}=${value}`),
  };
  // The override in protobuf's text form, as the reference prints it.
  if (descriptor.limit !== undefined) {
    const { requestsPerUnit, unit } = descriptor.limit;
    fields.limit = `requests_per_unit:${requestsPerUnit} unit:${OVERRIDE_UNITS[unit]}`;
  }
  if (descriptor.hitsAddend !== undefined) fields.hitsAddend = Number(descriptor.hitsAddend);
  return fields;
}

/** `into` with each key of `from` it lacks; maps under a key both have are merged the same way. */
function mergeFirstWins(
  into: Record<string, JsonValue>,
  from: Readonly<Record<string, JsonValue>>,
): Record<string, JsonValue> {
  const merged = { ...into };
  for (const [key, value] of Object.entries(from)) {
    const present = Object.hasOwn(merged, key) ? merged[key] : undefined;
    if (present === undefined) define(merged, key, value);
    else if (isMap(present) && isMap(value)) define(merged, key, mergeFirstWins(present, value));
  }
  return merged;
}

/** As an own property, so that a key such as `__proto__` stays a plain key. */
function define(object: Record<string, JsonValue>, key: string, value: JsonValue): void {
  Object.defineProperty(object, key, {
    value,
    enumerable: true,
    writable: true,
    configurable: true,
  });
}

const isMap = (value: JsonValue): value is Record<string, JsonValue> =>
  typeof value === 'object' && value !== null && !Array.isArray(value);
