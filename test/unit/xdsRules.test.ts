import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import protobuf from 'protobufjs';
import { describe, expect, it } from 'vitest';
import { protoDir } from '../../src/core/protos.js';
import { dumpRules } from '../../src/rules/dumpRules.js';
import { loadRules } from '../../src/rules/loadRules.js';
import { loadXdsRules, RATE_LIMIT_CONFIG_TYPE } from '../../src/rules/xdsRules.js';

const root = new protobuf.Root();
root.resolvePath = (_origin, target) => `${protoDir}${target}`;
root.loadSync('ratelimit/config/ratelimit/v3/rls_conf.proto', { keepCase: true });
const RateLimitConfig = root.lookupType('ratelimit.config.ratelimit.v3.RateLimitConfig');

/** A resource as a management server sends it: the config, encoded, in an Any. */
function resource(config: object) {
  const value = RateLimitConfig.encode(RateLimitConfig.fromObject(config)).finish();
  return { type_url: RATE_LIMIT_CONFIG_TYPE, value };
}

const options = { defaultAlgorithm: 'fixed_window' as const };

describe('rules over xDS', () => {
  it('reads a RateLimitConfig as the same rules file would be read', () => {
    const rules = loadXdsRules(
      [
        resource({
          name: 'api',
          domain: 'api',
          descriptors: [
            {
              key: 'tenant',
              rate_limit: { unit: 'MINUTE', requests_per_unit: 5 },
              descriptors: [
                {
                  key: 'route',
                  value: '/login',
                  rate_limit: { unit: 'SECOND', requests_per_unit: 1 },
                },
              ],
            },
            { key: 'vip', rate_limit: { unlimited: true }, shadow_mode: true },
            {
              key: 'plan',
              detailed_metric: true,
              rate_limit: { unit: 'HOUR', requests_per_unit: 100, name: 'hourly' },
              metadata: { fields: { team: { stringValue: 'edge' }, tier: { numberValue: 2 } } },
            },
          ],
        }),
      ],
      options,
    );
    const dir = mkdtempSync(join(tmpdir(), 'tollgate-xds-'));
    const file = join(dir, 'api.yaml');
    writeFileSync(
      file,
      [
        'domain: api',
        'descriptors:',
        '  - key: tenant',
        '    rate_limit: { unit: minute, requests_per_unit: 5 }',
        '    descriptors:',
        '      - key: route',
        '        value: /login',
        '        rate_limit: { unit: second, requests_per_unit: 1 }',
        '  - key: vip',
        '    rate_limit: { unlimited: true }',
        '    shadow_mode: true',
        '  - key: plan',
        '    detailed_metric: true',
        '    rate_limit: { unit: hour, requests_per_unit: 100, name: hourly }',
        '    metadata: { team: edge, tier: 2 }',
        '',
      ].join('\n'),
    );
    try {
      expect(dumpRules(rules)).toEqual(dumpRules(loadRules(file, options)));
      const plan = rules.domains.get('api')?.root.bare.get('plan');
      expect(plan?.metadata).toEqual({ team: 'edge', tier: 2 });
      expect(plan?.detailedMetric).toBe(true);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });

  it('names the resource, the path and the key of a bad rule', () => {
    expect(() =>
      loadXdsRules(
        [
          resource({
            name: 'edge-rules',
            domain: 'api',
            descriptors: [{ key: 'tenant', rate_limit: { requests_per_unit: 5 } }],
          }),
        ],
        options,
      ),
    ).toThrow(
      /^RateLimitConfig 'edge-rules': descriptors\[0\]\.rate_limit\.unit: 'unknown' is not one of/,
    );
    expect(() =>
      loadXdsRules([resource({ name: 'x', domain: '', descriptors: [] })], options),
    ).toThrow(/^RateLimitConfig 'x': domain: /);
  });

  it('refuses one domain in two resources unless MERGE_DOMAIN_CONFIG merges them', () => {
    const a = resource({
      name: 'a',
      domain: 'api',
      descriptors: [{ key: 'tenant', rate_limit: { unit: 'MINUTE', requests_per_unit: 5 } }],
    });
    const b = resource({
      name: 'b',
      domain: 'api',
      descriptors: [{ key: 'ip', rate_limit: { unit: 'SECOND', requests_per_unit: 9 } }],
    });
    expect(() => loadXdsRules([a, b], options)).toThrow(/already defined in RateLimitConfig 'a'/);
    const merged = loadXdsRules([a, b], { ...options, mergeDomainConfig: true });
    const lines = dumpRules(merged).join('\n');
    expect(lines).toContain('tenant');
    expect(lines).toContain('ip');
  });

  it('refuses a resource of another type, and bytes that are not a RateLimitConfig', () => {
    expect(() =>
      loadXdsRules(
        [{ type_url: 'type.googleapis.com/google.protobuf.Empty', value: new Uint8Array() }],
        options,
      ),
    ).toThrow(/resources\[0\]: type 'type.googleapis.com\/google.protobuf.Empty' is not/);
    expect(() =>
      loadXdsRules(
        [{ type_url: RATE_LIMIT_CONFIG_TYPE, value: Uint8Array.of(0x0a, 0xff) }],
        options,
      ),
    ).toThrow(/resources\[0\]: not a RateLimitConfig/);
  });

  it('refuses an update of more descriptors than the bound, before reading them', () => {
    const many = Array.from({ length: 1_001 }, (_, i) => ({ key: `k${i}` }));
    const nested = { key: 'top', descriptors: many };
    const wide = Array.from({ length: 100 }, () => nested);
    const started = performance.now();
    expect(() =>
      loadXdsRules([resource({ name: 'huge', domain: 'api', descriptors: wide })], options),
    ).toThrow(/^RateLimitConfig 'huge': the update holds more than 100000 descriptors/);
    expect(performance.now() - started).toBeLessThan(5_000);
  });

  it('refuses more replaces entries than the bound, before decoding them', () => {
    // Two bytes each on the wire: 4 MiB would hold two million.
    const replaces = Array.from({ length: 100_001 }, () => ({}));
    const rate_limit = { unit: 'SECOND', requests_per_unit: 1, name: 'a', replaces };
    expect(() =>
      loadXdsRules(
        [resource({ name: 'many', domain: 'api', descriptors: [{ key: 'k', rate_limit }] })],
        options,
      ),
    ).toThrow(
      /^RateLimitConfig 'many': the update's rate limits list more than 100000 entries in their replaces$/,
    );
  });

  it('refuses metadata that expands past its bound from the wire bytes, before decoding them', () => {
    // A descriptor whose metadata is a list of 1,000,000 empty lists: 4 MB on the wire.
    const item = Buffer.from([0x0a, 0x02, 0x32, 0x00]); // ListValue.values: Value{list_value: {}}
    const lists = Buffer.alloc(item.length * 1_000_000);
    for (let at = 0; at < lists.length; at += item.length) item.copy(lists, at);
    const field = (tag: number, bytes: Uint8Array) =>
      protobuf.Writer.create()
        .uint32((tag << 3) | 2)
        .bytes(bytes)
        .finish();
    const value = field(6, lists); // Value.list_value
    const entry = Buffer.concat([field(1, Buffer.from('bomb')), field(2, value)]);
    const struct = field(1, entry); // Struct.fields
    const descriptor = Buffer.concat([field(1, Buffer.from('k')), field(8, struct)]);
    const config = Buffer.concat([
      field(1, Buffer.from('bomb')),
      field(2, Buffer.from('api')),
      field(3, descriptor),
    ]);
    expect(config.length).toBeGreaterThan(4_000_000);
    const before = process.memoryUsage().heapUsed;
    const started = performance.now();
    expect(() =>
      loadXdsRules([{ type_url: RATE_LIMIT_CONFIG_TYPE, value: config }], options),
    ).toThrow(
      /^RateLimitConfig 'bomb': the update's descriptor metadata holds more than 100000 values/,
    );
    expect(performance.now() - started).toBeLessThan(2_000);
    expect(process.memoryUsage().heapUsed - before).toBeLessThan(64 * 1024 * 1024);
  });

  it('reads descriptors and metadata nested to the bound of 128 messages, and refuses one more in its own words', () => {
    const field = (tag: number, bytes: Uint8Array) =>
      protobuf.Writer.create()
        .uint32((tag << 3) | 2)
        .bytes(bytes)
        .finish();
    const text = (value: string) => Buffer.from(value);
    const config = (descriptor: Uint8Array) =>
      Buffer.concat([field(1, text('deep')), field(2, text('api')), field(3, descriptor)]);
    /** `levels` descriptors, each in the one before: the innermost is that many messages deep. */
    const descriptors = (levels: number) => {
      let deep: Uint8Array = field(1, text('leaf'));
      for (let i = 1; i < levels; i++)
        deep = Buffer.concat([field(1, text(`k${i}`)), field(4, deep)]);
      return config(deep);
    };
    /**
     * A descriptor (level 1) whose metadata nests structs: each is a Struct, a fields entry and a
     * Value, three levels; the innermost message is `levels` deep.
     */
    const metadata = (levels: number) => {
      let value: Uint8Array = field(3, text('leaf')); // Value.string_value
      for (let depth = levels; depth > 4; depth -= 3) {
        value = field(5, field(1, Buffer.concat([field(1, text('n')), field(2, value)])));
      }
      const struct = field(1, Buffer.concat([field(1, text('n')), field(2, value)]));
      if ((levels - 1) % 3 !== 0) throw new Error(`no struct nesting is ${levels} deep`);
      return config(Buffer.concat([field(1, text('k')), field(8, struct)]));
    };
    const load = (bytes: Uint8Array) =>
      loadXdsRules([{ type_url: RATE_LIMIT_CONFIG_TYPE, value: bytes }], options);
    // protobufjs alone stops at 100 levels, with its own message.
    for (const levels of [100, 101, 128]) {
      expect(load(descriptors(levels)).domains.has('api')).toBe(true);
    }
    expect(load(metadata(127)).domains.has('api')).toBe(true);
    expect(() => load(descriptors(129))).toThrow(
      /^RateLimitConfig 'deep': nests deeper than 128 messages \(descriptors and their metadata\)$/,
    );
    expect(() => load(metadata(130))).toThrow(
      /^RateLimitConfig 'deep': nests deeper than 128 messages/,
    );
  });

  it('refuses descriptors nested past 128 levels, and reads metadata within the bounds', () => {
    const field = (tag: number, bytes: Uint8Array) =>
      protobuf.Writer.create()
        .uint32((tag << 3) | 2)
        .bytes(bytes)
        .finish();
    let deep: Uint8Array = field(1, Buffer.from('leaf'));
    for (let i = 0; i < 200; i++)
      deep = Buffer.concat([field(1, Buffer.from(`k${i}`)), field(4, deep)]);
    const config = Buffer.concat([field(1, Buffer.from('deep')), field(3, deep)]);
    expect(() =>
      loadXdsRules([{ type_url: RATE_LIMIT_CONFIG_TYPE, value: config }], options),
    ).toThrow(/^RateLimitConfig 'deep': nests deeper than 128 messages/);
    const values = Array.from({ length: 1_000 }, (_, i) => ({ stringValue: `v${i}` }));
    const rules = loadXdsRules(
      [
        resource({
          name: 'api',
          domain: 'api',
          descriptors: [
            {
              key: 'k',
              rate_limit: { unit: 'MINUTE', requests_per_unit: 5 },
              metadata: { fields: { list: { listValue: { values } } } },
            },
          ],
        }),
      ],
      options,
    );
    expect(rules.domains.has('api')).toBe(true);
  });
});
