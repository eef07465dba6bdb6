// proto/ for RLQS is written by hand; this holds every field of it to the generated Go of
// go-control-plane/envoy v1.40.0, the Envoy API that the RLQS support is written against. The
// module comes from the Go module proxy (it is cached once fetched).
import { spawnSync } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import protobuf from 'protobufjs';
import { describe, expect, it } from 'vitest';
import { protoDir, rlqsProtoFile } from '../../src/core/protos.js';

const MODULE = 'github.com/envoyproxy/go-control-plane/envoy@v1.40.0';
const GO_FILES = [
  ['service/rate_limit_quota/v3/rlqs.pb.go', 'envoy.service.rate_limit_quota.v3'],
  ['type/v3/ratelimit_strategy.pb.go', 'envoy.type.v3'],
  ['type/v3/token_bucket.pb.go', 'envoy.type.v3'],
] as const;

interface Field {
  message: string;
  name: string;
  number: number;
  /** The wire kind Go's tag gives: varint, bytes, fixed64... */
  kind: string;
  repeated: boolean;
}

function moduleDir(): string {
  const go = spawnSync('go', ['mod', 'download', '-json', MODULE], { encoding: 'utf8' });
  if (go.status !== 0) throw new Error(`go mod download ${MODULE} failed: ${go.stderr}`);
  return (JSON.parse(go.stdout) as { Dir: string }).Dir;
}

/** Every field of the Go structs: a oneof's wrapper struct belongs to the message around it. */
function goFields(source: string, pkg: string): Field[] {
  const fields: Field[] = [];
  const structs = source.matchAll(/^type (\w+) struct \{\n([\s\S]*?)^\}/gm);
  for (const [, goName, body] of structs) {
    for (const tag of body!.matchAll(
      /protobuf:"(\w+),(\d+),(opt|rep),name=(\w+)[^"]*?(,oneof)?"/g,
    )) {
      const [, kind, number, label, name, oneof] = tag;
      let type = goName!;
      if (oneof) type = type.replace(/_$/, '').replace(/_[A-Za-z0-9]+$/, '');
      fields.push({
        message: `${pkg}.${type.replace(/_/g, '.')}`,
        name: name!,
        number: Number(number),
        kind: kind!,
        repeated: label === 'rep',
      });
    }
  }
  return fields;
}

const WIRE_KIND: Record<string, string> = {
  uint64: 'varint',
  uint32: 'varint',
  int32: 'varint',
  bool: 'varint',
  string: 'bytes',
  bytes: 'bytes',
};

function ourField(root: protobuf.Root, field: Field): Omit<Field, 'message' | 'name'> | undefined {
  const type = root.lookupType(field.message);
  const ours = type.fields[field.name];
  if (!ours) return undefined;
  ours.resolve();
  const kind =
    ours.resolvedType instanceof protobuf.Enum ? 'varint' : (WIRE_KIND[ours.type] ?? 'bytes');
  return { number: ours.id, kind, repeated: ours.repeated || ours.map };
}

describe("RLQS protos against go-control-plane/envoy v1.40.0's generated Go", () => {
  const root = new protobuf.Root();
  root.resolvePath = (_origin, target) => `${protoDir}${target}`;
  root.loadSync(rlqsProtoFile, { keepCase: true });
  root.resolveAll();

  it('has every field of the Go types, with its number, wire kind and label', () => {
    const dir = moduleDir();
    const fields = GO_FILES.flatMap(([file, pkg]) =>
      goFields(readFileSync(join(dir, file), 'utf8'), pkg),
    );
    // The three files hold 21 fields; fewer means the parse above missed some.
    expect(fields.length).toBe(21);
    for (const field of fields) {
      expect(ourField(root, field), `${field.message}.${field.name}`).toEqual({
        number: field.number,
        kind: field.kind,
        repeated: field.repeated,
      });
    }
  });

  it('has no field the Go types lack', () => {
    const dir = moduleDir();
    const names = new Set(
      GO_FILES.flatMap(([file, pkg]) => goFields(readFileSync(join(dir, file), 'utf8'), pkg)).map(
        (field) => `${field.message}.${field.name}`,
      ),
    );
    const ours: string[] = [];
    const walk = (ns: protobuf.NamespaceBase) => {
      for (const nested of ns.nestedArray) {
        if (nested instanceof protobuf.Type) {
          if (
            !/^\.(envoy\.service\.rate_limit_quota|envoy\.type\.v3\.(RateLimitStrategy|TokenBucket))/.test(
              nested.fullName,
            )
          )
            continue;
          for (const field of nested.fieldsArray)
            ours.push(`${nested.fullName.slice(1)}.${field.name}`);
        }
        if (nested instanceof protobuf.Namespace) walk(nested);
      }
    };
    walk(root);
    expect(ours.filter((name) => !names.has(name))).toEqual([]);
    expect(ours.length).toBe(names.size);
  });
});
