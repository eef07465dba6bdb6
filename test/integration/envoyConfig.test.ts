import { spawn } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { parse } from 'yaml';
import { loadRules } from '../../src/rules/loadRules.js';

// The Envoy samples (envoy/envoy.yaml, and envoy/envoy-rlqs.yaml for the rate_limit_quota filter)
// are checked against Envoy's published v3 API by the Go validator in envoy/validate, through
// `npm run validate:envoy`. Each broken copy is made from the real file by one substitution, so
// the faults follow its edits; a substitution that no longer finds its text fails the test rather
// than checking an unbroken copy.

const envoyYaml = readFileSync('envoy/envoy.yaml', 'utf8');
const rlqsYaml = readFileSync('envoy/envoy-rlqs.yaml', 'utf8');
const HTTP_RATELIMIT = 'type.googleapis.com/envoy.extensions.filters.http.ratelimit.v3.RateLimit';
const NETWORK_RATELIMIT =
  'type.googleapis.com/envoy.extensions.filters.network.ratelimit.v3.RateLimit';
const ROUTER = 'type.googleapis.com/envoy.extensions.filters.http.router.v3.Router';

interface Run {
  code: number | null;
  stdout: string;
  stderr: string;
}

function validate(args: string[], env: NodeJS.ProcessEnv = process.env): Promise<Run> {
  return new Promise((resolve) => {
    const child = spawn(process.execPath, ['scripts/validate-envoy.mjs', ...args], { env });
    let stdout = '';
    let stderr = '';
    child.stdout.on('data', (chunk: Buffer) => (stdout += chunk.toString()));
    child.stderr.on('data', (chunk: Buffer) => (stderr += chunk.toString()));
    child.once('close', (code) => resolve({ code, stdout, stderr }));
  });
}

/** A sample with the first match of `find` after `marker` replaced. */
function broken(yaml: string, marker: string, find: string | RegExp, replacement: string): string {
  const at = yaml.indexOf(marker);
  expect(at, `the sample no longer has ${marker}`).toBeGreaterThanOrEqual(0);
  const after = yaml.slice(at);
  const changed = after.replace(find, replacement);
  expect(changed, `the sample no longer has ${String(find)} after ${marker}`).not.toBe(after);
  return yaml.slice(0, at) + changed;
}

let dir: string;

beforeAll(async () => {
  dir = mkdtempSync(join(tmpdir(), 'tollgate-envoy-'));
  // The first build downloads Envoy's API modules and compiles them; later runs reuse the binary.
  const build = await validate(['--print-binary']);
  expect(build, build.stderr).toMatchObject({ code: 0 });
}, 300_000);

afterAll(() => rmSync(dir, { recursive: true, force: true }));

async function check(name: string, yaml: string): Promise<Run> {
  const file = join(dir, `${name}.yaml`);
  writeFileSync(file, yaml);
  return validate([file]);
}

describe("envoy/envoy.yaml against Envoy's API", () => {
  it('is valid, with the other samples that the validator checks by default', async () => {
    expect(await validate([])).toEqual({
      code: 0,
      stdout:
        'OK: envoy/envoy.yaml\nOK: envoy/envoy-local.yaml\nOK: envoy/envoy-rlqs.yaml\n' +
        'OK: envoy/envoy-token-budget.yaml\n',
      stderr: '',
    });
  });

  it.each([
    {
      fault: 'a misspelt HTTP rate-limit field',
      yaml: () => broken(envoyYaml, HTTP_RATELIMIT, 'failure_mode_deny:', 'failure_mode_denny:'),
      message: 'typed_config.failure_mode_denny: unknown field "failure_mode_denny"',
    },
    {
      fault: 'a timeout that is not a duration',
      yaml: () => broken(envoyYaml, HTTP_RATELIMIT, /timeout: \S+/, 'timeout: fast'),
      message: 'typed_config.timeout: invalid google.protobuf.Duration value "fast"',
    },
    {
      fault: 'an unknown @type',
      yaml: () => broken(envoyYaml, ROUTER, 'http.router.v3', 'http.routr.v3'),
      message: `typed_config.@type: unable to resolve "${ROUTER.replace('router', 'routr')}"`,
    },
    {
      fault: 'a value outside an enum',
      yaml: () =>
        broken(envoyYaml, HTTP_RATELIMIT, /x_ratelimit_headers: \S+/, "x_ratelimit_headers: 'ON'"),
      message:
        'enable_x_ratelimit_headers: invalid value for enum field enableXRatelimitHeaders: "ON"',
    },
    {
      // The bootstrap's ValidateAll checks that a typed_config is set but never unpacks it: this
      // copy would pass unless the validator walked into every Any and validated what is inside.
      fault: 'network rate limits without a domain',
      yaml: () => broken(envoyYaml, NETWORK_RATELIMIT, /\n *domain: \S+/, ''),
      message: `typed_config.domain: value length must be at least 1 runes (in ${NETWORK_RATELIMIT})`,
    },
    {
      // Two Anys deep: the HTTP filter's config sits inside the connection manager's.
      fault: 'HTTP rate limits with an empty domain',
      yaml: () => broken(envoyYaml, HTTP_RATELIMIT, /domain: \S+/, "domain: ''"),
      message: `typed_config.domain: value length must be at least 1 runes (in ${HTTP_RATELIMIT})`,
    },
  ])('rejects $fault, naming it', async ({ fault, yaml, message }) => {
    const name = fault.replaceAll(/\W+/g, '-');
    const { code, stdout } = await check(name, yaml());
    expect(code).toBe(1);
    expect(stdout.startsWith(`${join(dir, name)}.yaml: static_resources.`)).toBe(true);
    expect(stdout).toMatch(message);
    expect(stdout).not.toMatch(/OK:/);
  });

  it('reports every fault that the API rules find, not just the first', async () => {
    const yaml = broken(
      broken(envoyYaml, NETWORK_RATELIMIT, /\n *domain: \S+/, ''),
      '- name: tollgate',
      /connect_timeout: \S+/,
      'connect_timeout: 0s',
    );
    const { code, stdout } = await check('two-faults', yaml);
    expect(code).toBe(1);
    expect(stdout).toMatch(/\.clusters\[\d+\]\.connect_timeout: value must be greater than 0s\n/);
    expect(stdout).toMatch(/\.typed_config\.domain: value length must be at least 1 runes/);
    expect(stdout.trim().split('\n')).toHaveLength(2);
  });

  it('says how to get Go when it is missing', async () => {
    const { code, stderr } = await validate([], { ...process.env, PATH: '/nonexistent' });
    expect(code).toBe(2);
    expect(stderr).toMatch(/Go 1\.26 or newer is needed .* https:\/\/go\.dev\/dl/);
  });
});

describe("envoy/envoy-rlqs.yaml, the rate_limit_quota sample, against Envoy's API", () => {
  const QUOTA_FILTER = 'RateLimitQuotaFilterConfig';
  const BUCKET = 'RateLimitQuotaBucketSettings';
  const TYPE = 'type.googleapis.com/envoy.extensions.filters.http.rate_limit_quota.v3.';
  // Where the faults sit: the filter's config, and the settings of its first bucket (/orders).
  const FILTER_PATH =
    'static_resources.listeners[0].filter_chains[0].filters[0].typed_config.http_filters[0].typed_config';
  const BUCKET_PATH = `${FILTER_PATH}.bucket_matchers.matcher_list.matchers[0].on_match.action.typed_config`;

  it('is valid', async () => {
    expect(await validate(['envoy/envoy-rlqs.yaml'])).toEqual({
      code: 0,
      stdout: 'OK: envoy/envoy-rlqs.yaml\n',
      stderr: '',
    });
  });

  it.each([
    {
      fault: 'a misspelt filter field',
      yaml: () => broken(rlqsYaml, QUOTA_FILTER, 'domain:', 'domian:'),
      message: `${FILTER_PATH}.domian: unknown field "domian"`,
    },
    {
      fault: 'a filter without its RLQS server',
      yaml: () => broken(rlqsYaml, QUOTA_FILTER, /\n *rlqs_server:\n.*\n.*cluster_name: \S+/, ''),
      message: `${FILTER_PATH}.rlqs_server: value is required (in ${TYPE}${QUOTA_FILTER})`,
    },
    {
      fault: 'an empty domain',
      yaml: () => broken(rlqsYaml, QUOTA_FILTER, /domain: \S+/, "domain: ''"),
      message: `${FILTER_PATH}.domain: value length must be at least 1 runes (in ${TYPE}${QUOTA_FILTER})`,
    },
    {
      fault: 'a matcher input without a name',
      yaml: () => broken(rlqsYaml, QUOTA_FILTER, /\n *name: path/, ''),
      message:
        `${FILTER_PATH}.bucket_matchers.matcher_list.matchers[0].predicate.single_predicate.input.name: ` +
        `value length must be at least 1 runes (in ${TYPE}${QUOTA_FILTER})`,
    },
    {
      // Three Anys deep: the bucket's settings are the matcher's action, inside the filter's
      // config, inside the connection manager's.
      fault: "a misspelt field in a bucket's settings",
      yaml: () => broken(rlqsYaml, BUCKET, 'reporting_interval:', 'reportng_interval:'),
      message: `${BUCKET_PATH}.reportng_interval: unknown field "reportng_interval"`,
    },
    {
      fault: 'a reporting_interval that is not a duration',
      yaml: () => broken(rlqsYaml, BUCKET, /reporting_interval: \S+/, 'reporting_interval: soon'),
      message: `${BUCKET_PATH}.reporting_interval: invalid google.protobuf.Duration value "soon"`,
    },
    {
      fault: 'a reporting_interval of 100 ms or less',
      yaml: () => broken(rlqsYaml, BUCKET, /reporting_interval: \S+/, 'reporting_interval: 0.1s'),
      message: `${BUCKET_PATH}.reporting_interval: value must be greater than 100ms (in ${TYPE}${BUCKET})`,
    },
    {
      fault: 'a bucket without its reporting_interval',
      yaml: () => broken(rlqsYaml, BUCKET, /\n *reporting_interval: \S+/, ''),
      message: `${BUCKET_PATH}.reporting_interval: value is required (in ${TYPE}${BUCKET})`,
    },
    {
      fault: 'a bucket_id_builder with no entries',
      yaml: () =>
        broken(
          rlqsYaml,
          BUCKET,
          /bucket_id_builder:\n( *)bucket_id_builder:\n[\s\S]*?string_value: orders\n/,
          'bucket_id_builder:\n$1bucket_id_builder: {}\n',
        ),
      message: `${BUCKET_PATH}.bucket_id_builder.bucket_id_builder: value must contain at least 1 pair(s) (in ${TYPE}${BUCKET})`,
    },
    {
      fault: 'a fallback token bucket without its fill_interval',
      yaml: () => broken(rlqsYaml, BUCKET, /\n *fill_interval: \S+/, ''),
      message: `${BUCKET_PATH}.no_assignment_behavior.fallback_rate_limit.token_bucket.fill_interval: value is required (in ${TYPE}${BUCKET})`,
    },
    {
      fault: 'an expired_assignment_behavior_timeout of zero',
      yaml: () => broken(rlqsYaml, BUCKET, /behavior_timeout: \S+/, 'behavior_timeout: 0s'),
      message: `${BUCKET_PATH}.expired_assignment_behavior.expired_assignment_behavior_timeout: value must be greater than 0s (in ${TYPE}${BUCKET})`,
    },
  ])('rejects $fault, naming it by its path', async ({ fault, yaml, message }) => {
    const name = `rlqs-${fault.replaceAll(/\W+/g, '-')}`;
    const { code, stdout } = await check(name, yaml());
    expect(code).toBe(1);
    expect(stdout).toBe(`${join(dir, name)}.yaml: ${message}\n`);
  });

  // Envoy's API lets a bucket go without a bucket_id_builder: its requests are never reported and
  // get only the no_assignment_behavior, so no rule of tollgate's ever applies to them. The
  // validator, which checks what the API checks, passes it; the sample's buckets all have one.
  it("accepts a bucket without a bucket_id_builder, as Envoy's API does", async () => {
    const yaml = broken(rlqsYaml, BUCKET, /bucket_id_builder:\n[\s\S]*?string_value: orders\n/, '');
    expect(await check('rlqs-no-builder', yaml)).toMatchObject({ code: 0 });
  });
});

describe("envoy/envoy-token-budget.yaml, LLM token budgets, against Envoy's API", () => {
  const budgetYaml = readFileSync('envoy/envoy-token-budget.yaml', 'utf8');
  const ROUTE =
    'static_resources.listeners[0].filter_chains[0].filters[0].typed_config.route_config.virtual_hosts[0].routes[0]';
  const PER_ROUTE = 'RateLimitPerRoute';

  it('is valid, and its rules load', async () => {
    expect(await validate(['envoy/envoy-token-budget.yaml'])).toEqual({
      code: 0,
      stdout: 'OK: envoy/envoy-token-budget.yaml\n',
      stderr: '',
    });
    const rules = loadRules('envoy/token-budget.yaml', { defaultAlgorithm: 'sliding_window' });
    const tenant = rules.domains.get('llm')?.root.bare.get('tenant');
    expect(tenant?.limit).toMatchObject({
      requestsPerUnit: 1_000_000,
      algorithm: 'fixed_window',
      overdraw: true,
      calendar: { period: 'day', zone: 'Europe/Paris' },
    });
  });

  it.each([
    {
      fault: 'a misspelt is_negative_hits',
      yaml: () => broken(budgetYaml, PER_ROUTE, 'is_negative_hits:', 'is_negative_hit:'),
      message: `${ROUTE}.typed_per_filter_config.envoy.filters.http.ratelimit.rate_limits[2].hits_addend.is_negative_hit: unknown field "is_negative_hit"`,
    },
    {
      fault: 'a fixed hits_addend over the 10^9 Envoy allows',
      yaml: () => broken(budgetYaml, PER_ROUTE, 'number: 0', 'number: 1000000001'),
      message: `${ROUTE}.typed_per_filter_config[envoy.filters.http.ratelimit].rate_limits[0].hits_addend.number: value must be less than or equal to 1000000000`,
    },
    {
      // The API accepts it, and Envoy would charge one hit per request on the request path.
      fault: "the stream-done charge in the route's own rate_limits",
      yaml: () =>
        broken(
          budgetYaml,
          'timeout: 300s',
          'timeout: 300s',
          [
            'timeout: 300s',
            '                            rate_limits:',
            '                              - actions:',
            '                                  - request_headers:',
            '                                      header_name: x-tenant-id',
            '                                      descriptor_key: tenant',
            '                                hits_addend:',
            "                                  format: '%DYNAMIC_METADATA(tollgate.budget:tokens_used)%'",
            '                                apply_on_stream_done: true',
          ].join('\n'),
        ),
      message: `${ROUTE}.route.rate_limits[0].hits_addend: Envoy honours it only in typed_per_filter_config (RateLimitPerRoute.rate_limits), and ignores it here`,
    },
  ])('rejects $fault, naming it', async ({ fault, yaml, message }) => {
    const name = fault.replaceAll(/\W+/g, '-');
    const { code, stdout } = await check(name, yaml());
    expect(code).toBe(1);
    expect(stdout).toContain(`${join(dir, name)}.yaml: ${message}`);
  });
});

describe('envoy/envoy-local.yaml, the same bootstrap for an Envoy outside Docker Compose', () => {
  const local = (args: string[]): Promise<Run> =>
    new Promise((resolve) => {
      const child = spawn(process.execPath, ['scripts/envoy-local.mjs', ...args]);
      let stdout = '';
      let stderr = '';
      child.stdout.on('data', (chunk: Buffer) => (stdout += chunk.toString()));
      child.stderr.on('data', (chunk: Buffer) => (stderr += chunk.toString()));
      child.once('close', (code) => resolve({ code, stdout, stderr }));
    });
  const clusterAddresses = (yaml: string) =>
    (
      parse(yaml) as {
        static_resources: {
          clusters: {
            name: string;
            load_assignment: {
              endpoints: { lb_endpoints: { endpoint: { address: unknown } }[] }[];
            };
          }[];
        };
      }
    ).static_resources.clusters.map((cluster) => [
      cluster.name,
      cluster.load_assignment.endpoints[0]?.lb_endpoints[0]?.endpoint.address,
    ]);

  it("is up to date with envoy.yaml, and valid against Envoy's API", async () => {
    expect(await local(['--check'])).toMatchObject({ code: 0 });
    expect(await validate(['envoy/envoy-local.yaml'])).toMatchObject({ code: 0 });
  });

  it('differs from envoy.yaml only in the addresses it is given', async () => {
    const out = join(dir, 'elsewhere.yaml');
    const run = await local([
      '--tollgate',
      '[::1]:9081',
      '--upstream',
      'app.internal:80',
      '--out',
      out,
    ]);
    expect(run.code, run.stderr).toBe(0);
    const moved = readFileSync(out, 'utf8');
    expect(clusterAddresses(moved)).toEqual([
      ['tollgate', { socket_address: { address: '::1', port_value: 9081 } }],
      ['upstream', { socket_address: { address: 'app.internal', port_value: 80 } }],
    ]);
    // Three lines of header say where it came from.
    const back = moved
      .split('\n')
      .slice(3)
      .join('\n')
      .replace("address: '::1', port_value: 9081", 'address: tollgate, port_value: 8081')
      .replace("address: 'app.internal', port_value: 80", 'address: echo, port_value: 5678');
    expect(back).toBe(envoyYaml);
    expect(await validate([out])).toMatchObject({ code: 0 });
  });

  // As `npm run envoy:local -- ...` runs it: from the package root, with the user's directory in
  // INIT_CWD.
  const fromElsewhere = (args: string[]): Promise<Run> =>
    new Promise((resolve) => {
      const child = spawn(
        process.execPath,
        [join(process.cwd(), 'scripts/envoy-local.mjs'), ...args],
        {
          env: { ...process.env, INIT_CWD: dir },
        },
      );
      let stdout = '';
      let stderr = '';
      child.stdout.on('data', (chunk: Buffer) => (stdout += chunk.toString()));
      child.stderr.on('data', (chunk: Buffer) => (stderr += chunk.toString()));
      child.once('close', (code) => resolve({ code, stdout, stderr }));
    });

  it.each([
    ['--out, relative', ['--out', 'relative.yaml'], 'relative.yaml'],
    ['a positional FILE', ['positional.yaml'], 'positional.yaml'],
    ['--out, absolute', ['--out', '<dir>/absolute.yaml'], '<dir>/absolute.yaml'],
  ])('writes %s where the user is, and says the path as given', async (_, args, given) => {
    const path = (text: string) => text.replace('<dir>', dir);
    const run = await fromElsewhere(args.map(path));
    expect(run).toEqual({ code: 0, stdout: '', stderr: `envoy-local: wrote ${path(given)}\n` });
    const written = given.startsWith('<dir>') ? path(given) : join(dir, given);
    expect(readFileSync(written, 'utf8')).toBe(readFileSync('envoy/envoy-local.yaml', 'utf8'));
  });

  it('refuses two output files, and an unknown option, in one line', async () => {
    expect(await fromElsewhere(['a.yaml', '--out', 'b.yaml'])).toEqual({
      code: 1,
      stdout: '',
      stderr: 'envoy-local: give the output file once, as FILE or --out FILE\n',
    });
    const unknown = await fromElsewhere(['--bogus']);
    expect(unknown.code).toBe(1);
    expect(unknown.stderr).toMatch(/^envoy-local: Unknown option '--bogus'\.[^\n]*\n$/);
  });

  it('refuses an address that is not HOST:PORT, by option', async () => {
    const run = await local(['--upstream', 'app.internal', '--out', join(dir, 'never.yaml')]);
    expect(run).toMatchObject({ code: 1 });
    expect(run.stderr).toContain("--upstream: 'app.internal' is not HOST:PORT");
  });
});
