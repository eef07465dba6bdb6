/**
 * POST /json's request: a RateLimitRequest in proto3 JSON, into the same validated `Check` as the
 * gRPC path. Only the JSON's shape and types are checked here. The message is then encoded to
 * protobuf bytes and handed to the gRPC codec's decoder, so bounds, empty fields and bad units
 * fail with exactly the messages a gRPC caller gets.
 */
import protobuf from 'protobufjs';
import { InvalidRequestError } from '../../core/errors.js';
import { createRequestDecoder, type DecodedRequest, type RequestLimits } from '../grpc/codec.js';
import { loadProtoRoot } from '../../core/protos.js';

const requestType = loadProtoRoot('strings').lookupType(
  'envoy.service.ratelimit.v3.RateLimitRequest',
);

export function createJsonRequestDecoder(limits: RequestLimits): (json: unknown) => DecodedRequest {
  const decode = createRequestDecoder(limits);
  return (json) => {
    let message: Record<string, unknown>;
    try {
      message = toMessage(requestType, json, '');
    } catch (error) {
      if (error instanceof InvalidRequestError) return { ok: false, error };
      throw error;
    }
    const bytes = requestType.encode(message).finish();
    return decode(Buffer.from(bytes.buffer, bytes.byteOffset, bytes.length));
  };
}

// Both spellings proto3 JSON accepts: the lowerCamelCase JSON name and the original field name.
const fieldsByJsonName = new WeakMap<protobuf.Type, Map<string, protobuf.Field>>();

function fieldsOf(type: protobuf.Type): Map<string, protobuf.Field> {
  let fields = fieldsByJsonName.get(type);
  if (fields === undefined) {
    fields = new Map();
    for (const field of type.fieldsArray) {
      fields.set(field.name, field);
      fields.set(
        field.name.replace(/_([a-z0-9])/g, (_, c: string) => c.toUpperCase()),
        field,
      );
    }
    fieldsByJsonName.set(type, fields);
  }
  return fields;
}

function toMessage(type: protobuf.Type, json: unknown, path: string): Record<string, unknown> {
  if (typeof json !== 'object' || json === null || Array.isArray(json)) {
    fail(`${path === '' ? 'the request' : path} is not a JSON object`);
  }
  const fields = fieldsOf(type);
  const message: Record<string, unknown> = {};
  for (const [name, value] of Object.entries(json)) {
    const at = path === '' ? name : `${path}.${name}`;
    const field = fields.get(name);
    if (field === undefined) fail(`${at} is not a field of ${type.name}`);
    if (Object.hasOwn(message, field.name)) fail(`${at} is given twice`);
    // proto3 JSON: null means the field's default, i.e. absent.
    if (value === null) continue;
    if (field.map) throw new Error(`${type.name}.${field.name}: map fields are not supported`);
    message[field.name] = field.repeated ? toList(field, value, at) : toValue(field, value, at);
  }
  return message;
}

function toList(field: protobuf.Field, json: unknown, path: string): unknown[] {
  if (!Array.isArray(json)) fail(`${path} is not a list`);
  return json.map((item: unknown, i) => {
    if (item === null) fail(`${path}[${i}] is null`);
    return toValue(field, item, `${path}[${i}]`);
  });
}

const WRAPPERS = new Set(
  ['Int32Value', 'UInt32Value', 'Int64Value', 'UInt64Value', 'BoolValue', 'StringValue'].map(
    (name) => `.google.protobuf.${name}`,
  ),
);

function toValue(field: protobuf.Field, json: unknown, path: string): unknown {
  const resolved = field.resolvedType;
  if (resolved instanceof protobuf.Enum) return toEnum(resolved, json, path);
  if (resolved instanceof protobuf.Type) {
    // Wrappers such as google.protobuf.UInt64Value are their bare value in JSON.
    const wrapped = resolved.fields.value;
    if (WRAPPERS.has(resolved.fullName) && wrapped !== undefined) {
      return { value: toScalar(wrapped.type, json, path) };
    }
    return toMessage(resolved, json, path);
  }
  return toScalar(field.type, json, path);
}

function toEnum(type: protobuf.Enum, json: unknown, path: string): number {
  if (typeof json !== 'string') return Number(toInteger(json, path, 'int32'));
  const value = Object.hasOwn(type.values, json) ? type.values[json] : undefined;
  if (value === undefined) fail(`${path}: '${json}' is not a ${type.name}`);
  return value;
}

const INTEGER_RANGES: Record<string, readonly [bigint, bigint]> = {
  int32: [-(2n ** 31n), 2n ** 31n - 1n],
  uint32: [0n, 2n ** 32n - 1n],
  int64: [-(2n ** 63n), 2n ** 63n - 1n],
  uint64: [0n, 2n ** 64n - 1n],
};

function toScalar(type: string, json: unknown, path: string): unknown {
  if (type === 'string') {
    if (typeof json !== 'string') fail(`${path} is not a string`);
    return json;
  }
  if (type === 'bool') {
    if (typeof json !== 'boolean') fail(`${path} is not a boolean`);
    return json;
  }
  const value = toInteger(json, path, type);
  if (type.endsWith('32')) return Number(value);
  // protobufjs writes 64-bit integers from their two 32-bit halves, exactly.
  return { low: Number(value & 0xffffffffn), high: Number((value >> 32n) & 0xffffffffn) };
}

/** A JSON number that is a safe integer, or a decimal string (the exact form for 64 bits). */
function toInteger(json: unknown, path: string, type: string): bigint {
  const range = INTEGER_RANGES[type];
  if (range === undefined) throw new Error(`${path}: JSON of ${type} fields is not supported`);
  let value: bigint;
  if (typeof json === 'number' && Number.isSafeInteger(json)) value = BigInt(json);
  else if (typeof json === 'number' && Number.isInteger(json)) {
    fail(`${path} is too large to be exact as a JSON number; send it as a decimal string`);
  } else if (typeof json === 'string' && /^-?[0-9]+$/.test(json)) value = BigInt(json);
  else fail(`${path} is not an integer`);
  if (value < range[0] || value > range[1]) fail(`${path} is out of range for ${type}`);
  return value;
}

function fail(message: string): never {
  throw new InvalidRequestError(message);
}
