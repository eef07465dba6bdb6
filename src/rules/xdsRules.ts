/**
 * Rules that arrive over xDS (CONFIG_TYPE=GRPC_XDS_SOTW): each resource is a RateLimitConfig,
 * one domain's rules. Each is turned into the document a rules file of the same content would
 * give, and read by the same reader as files, so the same checks and bounds apply and an error
 * names the resource, the path in it and the key: `RateLimitConfig 'api': descriptors[0]...`.
 */
import { Document } from 'yaml';
import protobuf from 'protobufjs';
import { RulesError } from '../core/errors.js';
import { protoDir } from '../core/protos.js';
import { combineDomains, type LoadRulesOptions } from './loadRules.js';
import { parseRules } from './parseRules.js';
import { countXdsResource, MAX_XDS_DEPTH, xdsBudget, type XdsBudget } from './xdsBounds.js';
import type { DomainRules, RuleSet } from './types.js';

export const RATE_LIMIT_CONFIG_TYPE =
  'type.googleapis.com/ratelimit.config.ratelimit.v3.RateLimitConfig';

/** A resource as it arrives: google.protobuf.Any. */
export interface XdsResource {
  type_url?: string;
  value?: Uint8Array;
}

/**
 * Resources per update. Each is one domain; a management server that sends more is broken or
 * hostile. The bytes are bounded by the stream's message size (XDS_CLIENT_MAX_MSG_SIZE_IN_BYTES),
 * and what they expand to by the reader's node limit, as for files.
 */
export const MAX_XDS_RESOURCES = 10_000;

let configType: protobuf.Type | undefined;
function rateLimitConfigType(): protobuf.Type {
  if (configType === undefined) {
    const root = new protobuf.Root();
    root.resolvePath = (_origin, target) => `${protoDir}${target}`;
    root.loadSync('ratelimit/config/ratelimit/v3/rls_conf.proto', { keepCase: true });
    root.resolveAll();
    configType = root.lookupType('ratelimit.config.ratelimit.v3.RateLimitConfig');
  }
  return configType;
}

interface StructValue {
  nullValue?: unknown;
  numberValue?: number;
  stringValue?: string;
  boolValue?: boolean;
  structValue?: { fields?: Record<string, StructValue> };
  listValue?: { values?: StructValue[] };
}

/** google.protobuf.Struct's Value as the plain value it stands for. */
function plain(value: StructValue): unknown {
  if (value.structValue !== undefined) return plainStruct(value.structValue);
  if (value.listValue !== undefined) return (value.listValue.values ?? []).map(plain);
  if (value.stringValue !== undefined) return value.stringValue;
  if (value.boolValue !== undefined) return value.boolValue;
  if (value.numberValue !== undefined) {
    // The reader wants integers as bigint, as YAML gives them; other numbers stay numbers.
    return Number.isSafeInteger(value.numberValue) ? BigInt(value.numberValue) : value.numberValue;
  }
  return null;
}

function plainStruct(struct: { fields?: Record<string, StructValue> }): Record<string, unknown> {
  const out: Record<string, unknown> = {};
  for (const [key, value] of Object.entries(struct.fields ?? {})) {
    Object.defineProperty(out, key, { value: plain(value), enumerable: true, writable: true });
  }
  return out;
}

interface PolicyMessage {
  unit?: string;
  requests_per_unit?: number;
  unlimited?: boolean;
  name?: string;
  replaces?: { name?: string }[];
}

interface DescriptorMessage {
  key?: string;
  value?: string;
  rate_limit?: PolicyMessage;
  descriptors?: DescriptorMessage[];
  shadow_mode?: boolean;
  detailed_metric?: boolean;
  quota_mode?: boolean;
  metadata?: { fields?: Record<string, StructValue> };
}

/**
 * A descriptor as a rules file would write it. proto3 cannot tell an unset field from its
 * default, so false, 0 and '' are written only where they mean something: a value of '' is no
 * value, and a rate limit with no unit says so in the reader's words.
 */
function descriptorNode(d: DescriptorMessage): Record<string, unknown> {
  const node: Record<string, unknown> = { key: d.key ?? '' };
  if (d.value) node.value = d.value;
  if (d.rate_limit) {
    const p = d.rate_limit;
    const limit: Record<string, unknown> = {};
    if (p.unlimited) limit.unlimited = true;
    else {
      limit.unit = (p.unit ?? 'UNKNOWN').toLowerCase();
      limit.requests_per_unit = BigInt(p.requests_per_unit ?? 0);
    }
    if (p.name) limit.name = p.name;
    if (p.replaces?.length) limit.replaces = p.replaces.map((r) => ({ name: r.name ?? '' }));
    node.rate_limit = limit;
  }
  if (d.descriptors?.length) node.descriptors = d.descriptors.map(descriptorNode);
  if (d.shadow_mode) node.shadow_mode = true;
  if (d.detailed_metric) node.detailed_metric = true;
  if (d.quota_mode) node.quota_mode = true;
  if (d.metadata) node.metadata = plainStruct(d.metadata);
  return node;
}

interface ConfigMessage {
  name?: string;
  domain?: string;
  descriptors?: DescriptorMessage[];
}

/**
 * A RateLimitConfig's bytes as a plain object. protobufjs refuses messages nested past its own
 * limit, protoc's 100, in its own words; tollgate's bound is MAX_XDS_DEPTH, which the walk of the
 * wire bytes (xdsBounds.ts) has checked, counting every level protobufjs counts and more. So the
 * limit is raised to that bound for this call only: it is synchronous, and nothing else decodes
 * on this thread meanwhile.
 */
function decodeConfig(bytes: Uint8Array): ConfigMessage {
  const type = rateLimitConfigType();
  const { util, Reader } = protobuf;
  const saved = { util: util.recursionLimit, reader: Reader.recursionLimit };
  util.recursionLimit = Math.max(saved.util, MAX_XDS_DEPTH);
  Reader.recursionLimit = Math.max(saved.reader, MAX_XDS_DEPTH);
  try {
    return type.toObject(type.decode(bytes), { enums: String, longs: Number, defaults: false });
  } finally {
    util.recursionLimit = saved.util;
    Reader.recursionLimit = saved.reader;
  }
}

/**
 * One resource as the document a rules file of the same content would give, and the label of its
 * errors. The decoded message is dropped on return, before the document is read: an update near
 * the bounds holds hundreds of thousands of objects in each form.
 */
function documentOf(bytes: Uint8Array, where: string): { label: string; doc: Document.Parsed } {
  let message: ConfigMessage;
  try {
    message = decodeConfig(bytes);
  } catch (error) {
    throw new RulesError(`${where}: not a RateLimitConfig: ${(error as Error).message}`);
  }
  const doc = new Document({
    domain: message.domain ?? '',
    descriptors: (message.descriptors ?? []).map(descriptorNode),
  });
  return { label: `RateLimitConfig '${message.name ?? ''}'`, doc: doc as Document.Parsed };
}

/** One resource's rules; its name labels every error. `budget` counts what it holds down. */
function parseXdsResource(
  resource: XdsResource,
  index: number,
  options: LoadRulesOptions,
  budget: XdsBudget,
): DomainRules {
  const where = `resources[${index}]`;
  if (resource.type_url !== RATE_LIMIT_CONFIG_TYPE) {
    throw new RulesError(
      `${where}: type '${resource.type_url ?? ''}' is not ${RATE_LIMIT_CONFIG_TYPE}`,
    );
  }
  const bytes = resource.value ?? new Uint8Array();
  // Counted before it is decoded: what it holds, not what it weighs, is what costs.
  countXdsResource(bytes, where, budget);
  const { label, doc } = documentOf(bytes, where);
  try {
    return parseRules(doc, label, options);
  } catch (err) {
    if (err instanceof RangeError) {
      throw new RulesError(`${label}: nests too deep to read (${err.message})`, { cause: err });
    }
    throw err;
  }
}

/** Every resource of one update, as one rule set: domains merge as files do. */
export function loadXdsRules(
  resources: readonly XdsResource[],
  options: LoadRulesOptions,
): RuleSet {
  if (resources.length > MAX_XDS_RESOURCES) {
    throw new RulesError(
      `the update has ${resources.length} resources, over the limit of ${MAX_XDS_RESOURCES}`,
    );
  }
  const budget = xdsBudget();
  return combineDomains(
    resources.map((resource, i) => parseXdsResource(resource, i, options, budget)),
    options,
  );
}
