// The built `tollgate` command (dist/cli/main.js, built by test/globalSetup.ts), run as an operator
// would: its output and exit codes, against rules files, a running service and a real Redis.
import { spawn } from 'node:child_process';
import { copyFileSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { counterKey } from '../../src/store/keys.js';
import { freePort } from '../support/ports.js';
import { refusal, spawnTollgate } from '../support/processes.js';
import { startRedis, type TestRedis } from '../support/redis.js';
import { d, manualClock, startTollgate, writeRules, type Tollgate } from '../support/tollgate.js';
import { calendarBounds } from '../../src/rules/calendar.js';
import { makeCerts, type TestCerts } from '../support/certs.js';
import * as grpc from '@grpc/grpc-js';

const RULES = `
domain: api
descriptors:
  - key: tenant
    value: acme
    rate_limit: {unit: minute, requests_per_unit: 5, algorithm: fixed_window}
    descriptors:
      - key: route
        value: '/orders*'
        rate_limit: {requests_per_unit: 100, window: 30s, name: orders}
      - key: route
        rate_limit: {unlimited: true}
  - key: tenant
    rate_limit: {unit: second, requests_per_unit: 1, algorithm: token_bucket, burst: 1}
  - key: path
    value: '/api/*'
    share_threshold: true
    rate_limit: {unit: minute, requests_per_unit: 10, algorithm: fixed_window}
`;

interface Run {
  code: number | null;
  stdout: string;
  stderr: string;
}

/** Runs the CLI with only PATH and `env` in its environment, so no outside setting leaks in. */
function cli(args: string[], env: Record<string, string> = {}): Promise<Run> {
  const child = spawn(process.execPath, ['dist/cli/main.js', ...args], {
    env: { PATH: process.env.PATH ?? '', ...env },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let stdout = '';
  let stderr = '';
  child.stdout.on('data', (chunk: Buffer) => (stdout += chunk.toString()));
  child.stderr.on('data', (chunk: Buffer) => (stderr += chunk.toString()));
  return new Promise((resolve, reject) => {
    child.once('error', reject);
    child.once('close', (code) => resolve({ code, stdout, stderr }));
  });
}

const rulesPath = writeRules(RULES);

describe('usage', () => {
  it('lists the commands with --help, and exits 2 on a usage error', async () => {
    const help = await cli(['--help']);
    expect(help.code).toBe(0);
    expect(help.stdout).toMatch(/serve.*\n.*check-config.*\n.*query.*\n.*explain.*\n.*counters/);
    expect(await cli([])).toMatchObject({ code: 2, stdout: '' });
    expect(await cli(['frobnicate'])).toMatchObject({ code: 2 });

    const commandHelp = await cli(['query', '--help']);
    expect(commandHelp.code).toBe(0);
    expect(commandHelp.stdout).toContain(
      'Usage: tollgate query [--addr HOST:PORT] --domain DOMAIN',
    );
    const unknown = await cli(['explain', '--domain', 'api', '--bogus']);
    expect(unknown.code).toBe(2);
    expect(unknown.stderr).toMatch(/^tollgate explain: Unknown option '--bogus'/);
    const missing = await cli(['explain', '--config', rulesPath, '--domain', 'api']);
    expect(missing.code).toBe(2);
    expect(missing.stderr).toMatch(/^tollgate explain: --descriptor is required/);
  });
});

describe('--version', () => {
  it("prints the package's version", async () => {
    const { version } = JSON.parse(readFileSync('package.json', 'utf8')) as { version: string };
    for (const flag of ['--version', '-v']) {
      expect(await cli([flag])).toEqual({ code: 0, stdout: `tollgate ${version}\n`, stderr: '' });
    }
  });
});

describe('serve', () => {
  let redis: TestRedis;
  beforeAll(async () => {
    redis = await startRedis();
  });
  afterAll(async () => {
    await redis?.stop();
  });

  // As `npx tollgate serve` runs it; with WORKERS=2 its workers run the same command line.
  it.each([{ WORKERS: '1' }, { WORKERS: '2' }])(
    'runs the service until SIGTERM, with %o',
    async (workers) => {
      const env = { ...workers, REDIS_URL: redis.url };
      const service = await spawnTollgate(RULES, env, { entry: ['dist/cli/main.js', 'serve'] });
      try {
        const answer = await fetch(`${service.httpUrl}/json`, {
          method: 'POST',
          body: JSON.stringify({
            domain: 'api',
            descriptors: [{ entries: [{ key: 'tenant', value: 'acme' }] }],
          }),
        });
        expect(await answer.json()).toMatchObject({
          overallCode: 'OK',
          statuses: [{ currentLimit: { requestsPerUnit: 5, unit: 'MINUTE' } }],
        });
      } finally {
        expect(await service.stop()).toBe(0);
      }
    },
    30_000,
  );

  it('refuses an argument, and a bad setting stops it with one line', async () => {
    expect(await cli(['serve', 'now'])).toMatchObject({ code: 2 });
    const bad = await cli(['serve'], { CONFIG_PATH: rulesPath, FAILURE_MODE: 'sometimes' });
    expect(bad.code).toBe(1);
    expect(refusal(bad.stderr)).toMatch(/^FAILURE_MODE: 'sometimes' is not one of/);
  });
});

describe('check-config', () => {
  it('prints one line per rule, with DEFAULT_ALGORITHM from the environment', async () => {
    const run = await cli(['check-config', rulesPath], { DEFAULT_ALGORITHM: 'fixed_window' });
    expect(run).toMatchObject({ code: 0, stderr: '' });
    expect(run.stdout.split('\n')).toEqual([
      'api.tenant_acme: unit=MINUTE requests_per_unit=5, algorithm=fixed_window, shadow_mode: false',
      'api.tenant_acme.route_/orders*: window=30s requests_per_unit=100, algorithm=fixed_window, name=orders, shadow_mode: false',
      'api.tenant_acme.route: unlimited, shadow_mode: false',
      'api.tenant: unit=SECOND requests_per_unit=1, algorithm=token_bucket, burst=1, shadow_mode: false',
      'api.path_/api/*: unit=MINUTE requests_per_unit=10, algorithm=fixed_window, shadow_mode: false, share_threshold: true',
      '',
    ]);
  });

  it("checks the service's own rules, CONFIG_PATH, when no PATH is given", async () => {
    const run = await cli(['check-config'], { CONFIG_PATH: rulesPath });
    expect(run).toMatchObject({ code: 0, stderr: '' });
    expect(run.stdout).toContain('api.tenant_acme: unit=MINUTE requests_per_unit=5');
  });

  it('exits 1 with the rules error for a bad file', async () => {
    const bad = fileURLToPath(new URL('../fixtures/rules/invalid/bad-unit.yaml', import.meta.url));
    const run = await cli(['check-config', bad]);
    expect(run).toMatchObject({ code: 1, stdout: '' });
    expect(run.stderr).toBe(
      'tollgate check-config: bad-unit.yaml: descriptors[0].descriptors[1].rate_limit.unit: ' +
        "'minutes' is not one of second, minute, hour, day, week, month, year\n",
    );
  });
  it('reports every bad file of a directory, each with its path and key, then exits 1', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'tollgate-check-'));
    for (const name of ['bad-unit.yaml', 'negative-rpu.yaml']) {
      copyFileSync(
        fileURLToPath(new URL(`../fixtures/rules/invalid/${name}`, import.meta.url)),
        join(dir, name),
      );
    }
    writeFileSync(
      join(dir, 'good.yaml'),
      'domain: web\ndescriptors: [{key: a, rate_limit: {unit: second, requests_per_unit: 1}}]\n',
    );
    const run = await cli(['check-config', dir]);
    rmSync(dir, { recursive: true, force: true });
    expect(run).toEqual({
      code: 1,
      stdout: '',
      stderr:
        'tollgate check-config: bad-unit.yaml: descriptors[0].descriptors[1].rate_limit.unit: ' +
        "'minutes' is not one of second, minute, hour, day, week, month, year\n" +
        'tollgate check-config: negative-rpu.yaml: descriptors[0].rate_limit.requests_per_unit: ' +
        'must be between 0 and 4294967295, got -1\n',
    });
  });
});

describe('explain', () => {
  it('shows what each entry tried and which limit applies', async () => {
    const run = await cli([
      'explain',
      '--config',
      rulesPath,
      '--domain',
      'api',
      '--descriptor',
      'tenant=acme,route=/orders?id=1\\,2',
    ]);
    expect(run).toMatchObject({ code: 0, stderr: '' });
    expect(run.stdout).toBe(
      [
        'api tenant=acme,route=/orders?id=1\\,2',
        '  1. tenant=acme',
        '       exact "acme": matches rules.yaml descriptors[0]',
        '  2. route=/orders?id=1\\,2',
        '       exact "/orders?id=1,2": no rule',
        '       wildcard "/orders*": matches rules.yaml descriptors[0].descriptors[0]',
        '  => limited by rules.yaml descriptors[0].descriptors[0]: ' +
          'requests_per_unit=100 window=30s algorithm=sliding_window name="orders"',
        '',
      ].join('\n'),
    );
  });

  it('exits 1 for a domain the rules do not have', async () => {
    const run = await cli([
      'explain',
      '--config',
      rulesPath,
      '--domain',
      'web',
      '--descriptor',
      'a=b',
    ]);
    expect(run).toMatchObject({
      code: 1,
      stderr: "tollgate explain: no domain 'web' in the rules (domains: api)\n",
    });
  });
});

describe('query', () => {
  let tollgate: Tollgate;
  beforeAll(async () => {
    tollgate = await startTollgate({ rules: RULES });
  });
  afterAll(async () => {
    await tollgate?.stop();
  });
  const query = (...args: string[]) =>
    cli(['query', '--addr', tollgate.address, '--domain', 'api', ...args]);

  it('exits 0 when OK and 1 when OVER_LIMIT, printing each descriptor', async () => {
    const ok = await query('--descriptor', 'tenant=bob', '--descriptor', 'tenant=acme,route=/x');
    expect(ok).toMatchObject({ code: 0, stderr: '' });
    expect(ok.stdout).toMatch(
      /^OK\n {2}tenant=bob: OK, limit 1 per second, 0 remaining, resets in 1s\n {2}tenant=acme,route=\/x: OK, unlimited\n/,
    );
    const over = await query('--descriptor', 'tenant=bob');
    expect(over).toMatchObject({ code: 1, stderr: '' });
    expect(over.stdout).toMatch(
      /^OVER_LIMIT, retry after 1s\n {2}tenant=bob: OVER_LIMIT, limit 1 per second, 0 remaining, resets in 1s\n/,
    );
  });

  it('prints JSON with --json and charges --hits', async () => {
    const run = await query('--descriptor', 'tenant=acme', '--hits', '3', '--json');
    expect(run.code).toBe(0);
    expect(JSON.parse(run.stdout)).toMatchObject({
      source: 'service',
      allowed: true,
      code: 'OK',
      statuses: [
        {
          code: 'OK',
          currentLimit: { requestsPerUnit: 5, unit: 'minute', name: '' },
          limitRemaining: 2,
        },
      ],
    });
  });

  it('gives the cost back with --refund', async () => {
    // A token bucket of 1, on the tests' frozen clock: spent, then given back.
    expect(await query('--descriptor', 'tenant=refunded')).toMatchObject({ code: 0 });
    expect(await query('--descriptor', 'tenant=refunded')).toMatchObject({ code: 1 });
    const run = await query('--descriptor', 'tenant=refunded', '--refund');
    expect(run).toMatchObject({ code: 0, stderr: '' });
    expect(run.stdout).toMatch(/^OK\n {2}tenant=refunded: OK, limit 1 per second, 1 remaining/);
    expect(await query('--descriptor', 'tenant=refunded')).toMatchObject({ code: 0 });
  });

  it('exits 1 naming the address and what failed when tollgate is unreachable', async () => {
    const addr = `127.0.0.1:${await freePort()}`;
    const run = await cli(['query', '--addr', addr, '--domain', 'api', '--descriptor', 'a=b']);
    expect(run).toEqual({
      code: 1,
      stdout: '',
      stderr: `tollgate query: cannot reach tollgate at ${addr}: connect ECONNREFUSED ${addr}\n`,
    });
    // `.invalid` never resolves (RFC 6761).
    const host = 'tollgate.invalid:8081';
    const unresolved = await cli([
      'query',
      '--addr',
      host,
      '--domain',
      'api',
      '--descriptor',
      'a=b',
    ]);
    expect(unresolved).toMatchObject({ code: 1, stdout: '' });
    expect(unresolved.stderr).toMatch(
      /^tollgate query: cannot reach tollgate at tollgate\.invalid:8081: name resolution failed for target dns:tollgate\.invalid:8081\n$/,
    );
  });

  it('tells a tollgate that answered UNAVAILABLE from one that could not be reached', async () => {
    const storeDown = await startTollgate({
      rules: RULES,
      redisUrl: `redis://127.0.0.1:${await freePort()}`,
    });
    try {
      const run = await cli([
        'query',
        '--addr',
        storeDown.address,
        '--domain',
        'api',
        '--descriptor',
        'tenant=acme',
      ]);
      expect(run).toMatchObject({ code: 1, stdout: '' });
      expect(run.stderr).toMatch(
        new RegExp(
          `^tollgate query: tollgate at ${storeDown.address} answered UNAVAILABLE: store unavailable: [^\\n]+\\n$`,
        ),
      );
    } finally {
      await storeDown.stop();
    }
  });

  it.each([
    [['--hits', '-3'], "'-3' is negative"],
    [['--hits=-3'], "'-3' is negative"],
    [['--hits', '2.5'], "'2.5' is not a whole number"],
    [['--hits', 'many'], "'many' is not a whole number"],
    [['--hits', '4294967296'], "'4294967296' is too large"],
  ])('refuses %j, naming the option and the fault, with exit 2', async (hits, fault) => {
    const run = await query('--descriptor', 'tenant=carol', ...hits);
    expect(run).toMatchObject({ code: 2, stdout: '' });
    expect(run.stderr.split('\n')[0]).toBe(
      `tollgate query: --hits must be a whole number from 0 to 4294967295: ${fault}`,
    );
  });

  it('says which option lacks its value', async () => {
    const last = await query('--descriptor', 'tenant=carol', '--hits');
    expect(last).toMatchObject({ code: 2, stdout: '' });
    expect(last.stderr.split('\n')[0]).toBe('tollgate query: --hits needs a value');
    const beforeOption = await query('--hits', '--json', '--descriptor', 'tenant=carol');
    expect(beforeOption).toMatchObject({ code: 2, stdout: '' });
    expect(beforeOption.stderr.split('\n')[0]).toBe(
      "tollgate query: --hits needs a value, and '--json' is an option",
    );
  });

  it("takes a value that starts with a dash as the option's value", async () => {
    const run = await query('--descriptor', '-x=1', '--hits', '0');
    expect(run).toMatchObject({ code: 0, stderr: '' });
    expect(run.stdout).toBe('OK\n  -x=1: OK, no limit\n');
  });
});

describe('counters', () => {
  let redis: TestRedis;
  let tollgate: Tollgate;
  beforeAll(async () => {
    redis = await startRedis();
    tollgate = await startTollgate({ rules: RULES, redisUrl: redis.url });
  });
  afterAll(async () => {
    await tollgate?.stop();
    await redis?.stop();
  });
  const counters = (action: string, descriptor: string) =>
    cli(
      ['counters', action, '--config', rulesPath, '--domain', 'api', '--descriptor', descriptor],
      {
        REDIS_URL: redis.url,
      },
    );
  const key = counterKey(
    '',
    'api',
    [{ key: 'tenant', value: 'acme' }],
    undefined,
    'fixed_window',
    60_000,
  );

  it('reads a counter without consuming, and reset makes the next decision fresh', async () => {
    await tollgate.check({ domain: 'api', descriptors: [d('tenant', 'acme')] });
    await tollgate.check({ domain: 'api', descriptors: [d('tenant', 'acme')] });

    for (let i = 0; i < 2; i++) {
      const get = await counters('get', 'tenant=acme');
      expect(get).toMatchObject({ code: 0, stderr: '' });
      expect(get.stdout).toBe(
        `key ${JSON.stringify(key)}\nrule rules.yaml descriptors[0]\nremaining 3 of 5\nreset in 60s\n`,
      );
    }

    const reset = await counters('reset', 'tenant=acme');
    expect(reset).toMatchObject({ code: 0, stderr: '' });
    expect(reset.stdout).toContain('reset: the counter existed and is deleted\n');
    expect(await redis.client.exists(key)).toBe(0);
    const next = await tollgate.check({ domain: 'api', descriptors: [d('tenant', 'acme')] });
    expect(next.statuses?.[0]?.limit_remaining).toBe(4);
  });

  it("finds a calendar window's counter, keyed on its zone", async () => {
    const monthly = writeRules(
      'domain: budgets\ndescriptors:\n  - key: tenant\n    rate_limit: {calendar: month, time_zone: Asia/Tokyo, requests_per_unit: 100}\n',
    );
    // On this machine's clock, as the command reads Redis's: 10 ms before a month ends in Tokyo
    // would straddle it, so start clear of the end.
    const [, , monthEnd] = calendarBounds({ period: 'month', zone: 'Asia/Tokyo' }, Date.now());
    if ((monthEnd as number) - Date.now() < 10_000) {
      await new Promise((resolve) => setTimeout(resolve, (monthEnd as number) - Date.now() + 100));
    }
    const own = await startTollgate({
      rules: readFileSync(monthly, 'utf8'),
      redisUrl: redis.url,
      clock: manualClock(Date.now()),
    });
    try {
      await own.check({
        domain: 'budgets',
        descriptors: [{ ...d('tenant', 'acme'), hits_addend: { value: '30' } }],
      });
      const get = await cli(
        [
          'counters',
          'get',
          '--config',
          monthly,
          '--domain',
          'budgets',
          '--descriptor',
          'tenant=acme',
        ],
        { REDIS_URL: redis.url },
      );
      expect(get).toMatchObject({ code: 0, stderr: '' });
      expect(get.stdout).toMatch(/\|fw:month@Asia\/Tokyo"\n/);
      expect(get.stdout).toContain('remaining 70 of 100\n');
    } finally {
      await own.stop();
    }
  });

  it("finds the counter a share_threshold wildcard's values share", async () => {
    await tollgate.check({ domain: 'api', descriptors: [d('path', '/api/a')] });
    await tollgate.check({ domain: 'api', descriptors: [d('path', '/api/b')] });
    expect((await counters('get', 'path=/api/c')).stdout).toContain('remaining 8 of 10\n');
  });

  it('finds the hashed counter of a long descriptor, as the service keys it', async () => {
    const route = `/orders/${'x'.repeat(200)}`;
    await tollgate.check({ domain: 'api', descriptors: [d('tenant', 'acme', 'route', route)] });
    const get = await counters('get', `tenant=acme,route=${route}`);
    const entries = [
      { key: 'tenant', value: 'acme' },
      { key: 'route', value: route },
    ];
    const hashed = counterKey('', 'api', entries, undefined, 'sliding_window', 30_000);
    expect(hashed).toMatch(/^tg:\{3:api6:tenant4:acme\}0\|#[\w-]{22}\|sw:30000$/);
    expect(get.stdout).toContain(
      `key ${JSON.stringify(hashed)}\nhashed: the descriptor is too long to spell out in the key (see docs/redis.md, "Key format and upgrades")\n` +
        'rule rules.yaml descriptors[0].descriptors[0]\nremaining 99 of 100\n',
    );
    expect(await redis.client.exists(hashed)).toBe(1);
  });

  it('exits 1 and writes nothing when reading a counter that does not exist', async () => {
    const run = await counters('get', 'tenant=zed');
    expect(run).toMatchObject({ code: 1, stderr: '' });
    const get = run.stdout;
    expect(get).toContain(
      'no counter: nothing counted yet, in this window or any\nremaining 1 of 1\n',
    );
    expect(get).not.toContain('reset');
    const shown = /^key (".*")$/m.exec(get)?.[1];
    expect(shown).toBeDefined();
    expect(await redis.client.exists(JSON.parse(shown ?? '""') as string)).toBe(0);
    // Deleting what is not there leaves what was asked for: reset succeeds.
    const reset = await counters('reset', 'tenant=zed');
    expect(reset).toMatchObject({ code: 0, stderr: '' });
    expect(reset.stdout).toContain('reset: no counter\n');
  });

  it('exits 1 when no limit applies, or without REDIS_URL', async () => {
    const unlimited = await counters('get', 'tenant=acme,route=/health');
    expect(unlimited.code).toBe(1);
    expect(unlimited.stderr).toBe(
      'tollgate counters: tenant=acme,route=/health has no counter: unlimited by ' +
        'rules.yaml descriptors[0].descriptors[1]: never limited, no counter\n',
    );
    const noRedis = await cli([
      'counters',
      'get',
      '--config',
      rulesPath,
      '--domain',
      'api',
      '--descriptor',
      'tenant=acme',
    ]);
    expect(noRedis.code).toBe(1);
    expect(noRedis.stderr).toMatch(/^tollgate counters: REDIS_URL is not set/);
  });
});

describe("query over TLS, with the service's own settings", () => {
  let certs: TestCerts;
  let tollgate: Tollgate;
  /** The service's mutual TLS, as its environment says it. */
  let serviceEnv: Record<string, string>;
  beforeAll(async () => {
    certs = makeCerts();
    serviceEnv = {
      GRPC_SERVER_USE_TLS: 'true',
      GRPC_SERVER_TLS_CERT: certs.server.cert,
      GRPC_SERVER_TLS_KEY: certs.server.key,
      GRPC_CLIENT_TLS_CACERT: certs.ca,
    };
    tollgate = await startTollgate({
      rules: RULES,
      env: serviceEnv,
      clientCredentials: grpc.credentials.createSsl(
        readFileSync(certs.ca),
        readFileSync(certs.client.key),
        readFileSync(certs.client.cert),
      ),
    });
  });
  afterAll(async () => {
    await tollgate?.stop();
  });
  const ask = ['query', '--domain', 'api', '--descriptor', 'tenant=acme'];

  it("calls over mutual TLS from the service's environment and a client certificate", async () => {
    const port = tollgate.address.split(':').at(-1) ?? '';
    // The server's certificate names localhost: Node 26 refuses an IP address as a TLS server name.
    const client = [
      '--cert',
      certs.client.cert,
      '--key',
      certs.client.key,
      '--server-name',
      'localhost',
    ];
    const run = await cli([...ask, ...client], { ...serviceEnv, GRPC_PORT: port });
    expect(run).toMatchObject({ code: 0, stderr: '' });
    expect(run.stdout).toMatch(/^OK\n {2}tenant=acme: OK, limit 5 per minute, 4 remaining/);
  });

  it('says why a call without a client certificate, or in plaintext, fails', async () => {
    const plain = await cli([...ask, '--addr', tollgate.address]);
    expect(plain).toMatchObject({ code: 1, stdout: '' });
    expect(plain.stderr).toMatch(/^tollgate query: cannot reach tollgate at 127\.0\.0\.1:\d+: /);
    const byAddress = await cli([...ask, '--addr', tollgate.address, '--tls', '--ca', certs.ca]);
    expect(byAddress).toEqual({
      code: 2,
      stdout: '',
      stderr: expect.stringContaining(
        `TLS to an IP address (${tollgate.address}) needs --server-name NAME`,
      ) as string,
    });
    const anonymous = await cli([
      ...[...ask, '--addr', tollgate.address, '--tls', '--ca', certs.ca],
      ...['--server-name', 'localhost'],
    ]);
    expect(anonymous).toMatchObject({ code: 1, stdout: '' });
    expect(await cli([...ask, '--cert', certs.client.cert])).toEqual({
      code: 2,
      stdout: '',
      stderr: expect.stringContaining('--cert and --key go together') as string,
    });
    const missing = await cli([
      ...[...ask, '--addr', tollgate.address, '--ca', '/nonexistent/ca.crt'],
      ...['--server-name', 'localhost'],
    ]);
    expect(missing).toMatchObject({ code: 1, stdout: '' });
    expect(missing.stderr).toMatch(/^tollgate query: --ca: cannot read \/nonexistent\/ca\.crt: /);
  });
});
