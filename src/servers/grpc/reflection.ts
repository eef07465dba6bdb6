import type * as grpc from '@grpc/grpc-js';
import * as protoLoader from '@grpc/proto-loader';
import { ReflectionService } from '@grpc/reflection';
import { protoPath as healthProtoPath } from 'grpc-health-check';
import descriptor from 'protobufjs/ext/descriptor/index.js';

/**
 * Server reflection for the RLS and health services, so grpcurl and ghz need no proto file.
 *
 * proto-loader's file descriptors leave `dependency` empty and write type names relative to
 * their scope. Go's descriptor builder (grpcurl, ghz) refuses such files, so they are rewritten
 * here: every type name made absolute, and every file listing the files it refers to.
 */
interface FileProto {
  name: string;
  package: string;
  dependency: string[];
  messageType: MessageProto[];
  enumType: { name: string }[];
  service: { name: string; method: { inputType: string; outputType: string }[] }[];
}
interface MessageProto {
  name: string;
  field: { name: string; typeName?: string }[];
  nestedType: MessageProto[];
  enumType: { name: string }[];
  options?: { mapEntry?: boolean };
}

export function addReflection(
  server: grpc.Server,
  definition: protoLoader.PackageDefinition,
): void {
  const health = protoLoader.loadSync(healthProtoPath, { keepCase: true });
  const files = new Map<string, FileProto>();
  for (const entry of [...Object.values(definition), ...Object.values(health)]) {
    for (const bytes of (entry as { fileDescriptorProtos?: Buffer[] }).fileDescriptorProtos ?? []) {
      const file = descriptor.FileDescriptorProto.decode(bytes) as unknown as FileProto;
      if (!files.has(file.name)) files.set(file.name, file);
    }
  }

  const owner = new Map<string, string>(); // fully qualified type name -> file name
  for (const file of files.values()) {
    for (const message of file.messageType) nameMapEntries(message);
    const prefix = file.package ? `.${file.package}` : '';
    for (const name of file.enumType) owner.set(`${prefix}.${name.name}`, file.name);
    for (const message of file.messageType) indexMessage(message, prefix, file.name, owner);
  }

  for (const file of files.values()) {
    const dependencies = new Set<string>();
    const absolute = (name: string, scope: string): string => {
      const resolved = resolve(name, scope, owner);
      const home = owner.get(resolved);
      if (home !== undefined && home !== file.name) dependencies.add(home);
      return resolved;
    };
    const scope = file.package ? `.${file.package}` : '';
    for (const message of file.messageType) rewriteMessage(message, scope, absolute);
    for (const service of file.service) {
      for (const method of service.method) {
        method.inputType = absolute(method.inputType, scope);
        method.outputType = absolute(method.outputType, scope);
      }
    }
    file.dependency = [...dependencies];
  }

  const fileDescriptorProtos = [...files.values()].map((file) =>
    Buffer.from(descriptor.FileDescriptorProto.encode(file as never).finish()),
  );
  const patched: protoLoader.PackageDefinition = {};
  for (const [name, entry] of Object.entries({ ...definition, ...health })) {
    patched[name] = { ...entry, fileDescriptorProtos } as protoLoader.AnyDefinition;
  }
  new ReflectionService(patched).addToServer(server);
}

/**
 * protobufjs names a map's entry type after the field alone ("Fields"); protoc, and Go with it,
 * requires the field in CamelCase plus "Entry" ("FieldsEntry").
 */
function nameMapEntries(message: MessageProto): void {
  for (const nested of message.nestedType) {
    nameMapEntries(nested);
    if (!nested.options?.mapEntry) continue;
    const field = message.field.find((f) => f.typeName === nested.name);
    if (field === undefined) continue;
    nested.name = field.name.replace(/(?:^|_)(.)/g, (_, c: string) => c.toUpperCase()) + 'Entry';
    field.typeName = nested.name;
  }
}

function indexMessage(
  message: MessageProto,
  scope: string,
  file: string,
  owner: Map<string, string>,
) {
  const name = `${scope}.${message.name}`;
  owner.set(name, file);
  for (const nested of message.enumType) owner.set(`${name}.${nested.name}`, file);
  for (const nested of message.nestedType) indexMessage(nested, name, file, owner);
}

function rewriteMessage(
  message: MessageProto,
  scope: string,
  absolute: (n: string, s: string) => string,
) {
  const inner = `${scope}.${message.name}`;
  for (const field of message.field) {
    if (field.typeName) field.typeName = absolute(field.typeName, inner);
  }
  for (const nested of message.nestedType) rewriteMessage(nested, inner, absolute);
}

/** Protobuf's scoping: look the name up from the innermost scope outwards. */
function resolve(name: string, scope: string, owner: Map<string, string>): string {
  if (name.startsWith('.')) return name;
  for (let outer = scope; ; outer = outer.slice(0, outer.lastIndexOf('.'))) {
    const candidate = `${outer}.${name}`;
    if (owner.has(candidate)) return candidate;
    if (outer === '') return `.${name}`;
  }
}
