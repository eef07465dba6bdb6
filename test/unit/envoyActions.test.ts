import { describe, expect, it } from 'vitest';
import { stringify } from 'yaml';
import {
  EnvoyModelError,
  formatShape,
  normalizedPath,
  parseEnvoyModel,
  type HttpRateLimit,
  type HttpRequest,
} from '../support/envoyActions.js';

// The Envoy model on small inline bootstraps: route choice, each action, the drop rule, the
// client's address, Envoy's answer, the TCP filter, and refusals of what it does not model.

const TYPES = {
  hcm: 'type.googleapis.com/envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager',
  httpRateLimit: 'type.googleapis.com/envoy.extensions.filters.http.ratelimit.v3.RateLimit',
  networkRateLimit: 'type.googleapis.com/envoy.extensions.filters.network.ratelimit.v3.RateLimit',
  router: 'type.googleapis.com/envoy.extensions.filters.http.router.v3.Router',
  tcpProxy: 'type.googleapis.com/envoy.extensions.filters.network.tcp_proxy.v3.TcpProxy',
};

interface Options {
  filter?: object;
  hcm?: object;
  vhost?: object;
  node?: object;
  httpFilters?: object[];
}

/** A bootstrap with one HTTP listener, its virtual host `*` holding `routes`. */
function bootstrap(routes: object[], options: Options = {}): string {
  const rateLimit = {
    name: 'envoy.filters.http.ratelimit',
    typed_config: { '@type': TYPES.httpRateLimit, domain: 'edge', ...options.filter },
  };
  const router = { name: 'envoy.filters.http.router', typed_config: { '@type': TYPES.router } };
  const hcm = {
    '@type': TYPES.hcm,
    stat_prefix: 'ingress',
    route_config: { virtual_hosts: [{ name: 'api', domains: ['*'], routes, ...options.vhost }] },
    http_filters: [...(options.httpFilters ?? []), rateLimit, router],
    ...options.hcm,
  };
  return stringify({
    ...(options.node ? { node: options.node } : {}),
    static_resources: {
      listeners: [
        {
          name: 'http',
          filter_chains: [
            {
              filters: [
                { name: 'envoy.filters.network.http_connection_manager', typed_config: hcm },
              ],
            },
          ],
        },
      ],
    },
  });
}

function http(routes: object[], options: Options = {}): HttpRateLimit {
  const model = parseEnvoyModel(bootstrap(routes, options));
  expect(model.http).toHaveLength(1);
  return model.http[0]!;
}

/** One route for every path, with these `rate_limits` entries, each a list of actions. */
function withActions(...entries: object[][]): HttpRateLimit {
  return http([
    {
      match: { prefix: '/' },
      route: { cluster: 'upstream', rate_limits: entries.map((actions) => ({ actions })) },
    },
  ]);
}

const request = (path: string, headers: Record<string, string> = {}, clientAddress = '10.1.1.1') =>
  ({ path, headers, clientAddress }) satisfies HttpRequest;

const tenant = { request_headers: { header_name: 'x-tenant-id', descriptor_key: 'tenant' } };

describe('actions', () => {
  it('request_headers: the header value, looked up in any case; absent drops the descriptor', () => {
    const model = withActions([tenant], [{ remote_address: {} }]);
    expect(model.descriptorsFor(request('/', { 'X-Tenant-Id': 'acme' }))).toEqual([
      [{ key: 'tenant', value: 'acme' }],
      [{ key: 'remote_address', value: '10.1.1.1' }],
    ]);
    expect(model.descriptorsFor(request('/'))).toEqual([
      [{ key: 'remote_address', value: '10.1.1.1' }],
    ]);
  });

  it('drops the whole descriptor when any action cannot produce its entry', () => {
    const model = withActions([
      { generic_key: { descriptor_value: 'api' } },
      tenant,
      { request_headers: { header_name: 'x-plan', descriptor_key: 'plan' } },
    ]);
    expect(model.descriptorsFor(request('/', { 'x-tenant-id': 'acme' }))).toEqual([]);
    expect(model.requestFor(request('/', { 'x-tenant-id': 'acme' }))).toBeUndefined();
    expect(model.descriptorsFor(request('/', { 'x-tenant-id': 'a', 'x-plan': 'pro' }))).toEqual([
      [
        { key: 'generic_key', value: 'api' },
        { key: 'tenant', value: 'a' },
        { key: 'plan', value: 'pro' },
      ],
    ]);
  });

  it('skip_if_absent skips only its entry; with every entry skipped the descriptor is empty', () => {
    const plan = { header_name: 'x-plan', descriptor_key: 'plan', skip_if_absent: true };
    const model = withActions([tenant, { request_headers: plan }], [{ request_headers: plan }]);
    expect(model.descriptorsFor(request('/', { 'x-tenant-id': 'acme' }))).toEqual([
      [{ key: 'tenant', value: 'acme' }],
      [],
    ]);
    expect(model.shapes().map((s) => formatShape(s.entries))).toEqual([
      '[tenant=<request>, plan=<request>]',
      '[tenant=<request>]',
      '[plan=<request>]',
      '[]',
    ]);
  });

  it('generic_key: descriptor_key defaults to generic_key', () => {
    const model = withActions(
      [{ generic_key: { descriptor_value: 'api' } }],
      [{ generic_key: { descriptor_key: 'route', descriptor_value: 'orders' } }],
    );
    expect(model.descriptorsFor(request('/'))).toEqual([
      [{ key: 'generic_key', value: 'api' }],
      [{ key: 'route', value: 'orders' }],
    ]);
  });

  it('header_value_match: descriptor_key defaults to header_match; expect_match false inverts', () => {
    const get = { name: ':method', string_match: { exact: 'GET' } };
    const model = withActions(
      [{ header_value_match: { descriptor_value: 'read', headers: [get] } }],
      [{ header_value_match: { descriptor_value: 'write', expect_match: false, headers: [get] } }],
    );
    expect(model.descriptorsFor(request('/'))).toEqual([[{ key: 'header_match', value: 'read' }]]);
    expect(model.descriptorsFor({ ...request('/'), method: 'POST' })).toEqual([
      [{ key: 'header_match', value: 'write' }],
    ]);
  });

  it('header_value_match: :path is a pseudo-header with the query string; every matcher must fit', () => {
    const model = withActions([
      {
        header_value_match: {
          descriptor_key: 'export',
          descriptor_value: 'csv',
          headers: [
            { name: ':path', string_match: { prefix: '/reports/export' } },
            { name: ':path', string_match: { suffix: 'format=csv' } },
          ],
        },
      },
    ]);
    const sent = (path: string) => model.descriptorsFor(request(path)).length;
    expect(sent('/reports/export?format=csv')).toBe(1);
    expect(sent('/reports/export?format=pdf')).toBe(0);
    expect(sent('/reports/exports?format=csv')).toBe(1);
    expect(sent('/Reports/export?format=csv')).toBe(0);
  });

  it('header matchers: exact, prefix, suffix, contains, ignore_case, present, invert, range', () => {
    const matches = (matcher: object, headers: Record<string, string>) =>
      withActions([
        {
          header_value_match: {
            descriptor_value: 'hit',
            headers: [{ name: 'x-h', ...matcher }],
          },
        },
      ]).descriptorsFor(request('/', headers)).length === 1;
    expect(matches({ string_match: { exact: 'a' } }, { 'x-h': 'a' })).toBe(true);
    expect(matches({ string_match: { exact: 'a' } }, { 'x-h': 'ab' })).toBe(false);
    expect(matches({ string_match: { prefix: 'ab' } }, { 'x-h': 'abc' })).toBe(true);
    expect(matches({ string_match: { suffix: 'bc' } }, { 'x-h': 'abc' })).toBe(true);
    expect(matches({ string_match: { contains: 'b' } }, { 'x-h': 'abc' })).toBe(true);
    expect(matches({ string_match: { contains: 'z' } }, { 'x-h': 'abc' })).toBe(false);
    expect(matches({ string_match: { exact: 'ABC', ignore_case: true } }, { 'x-h': 'abc' })).toBe(
      true,
    );
    expect(matches({ string_match: { safe_regex: { regex: 'a.c' } } }, { 'x-h': 'abc' })).toBe(
      true,
    );
    expect(matches({ string_match: { safe_regex: { regex: 'b' } } }, { 'x-h': 'abc' })).toBe(false);
    // A missing header matches only a present_match: false; with invert, only present_match: true.
    expect(matches({ string_match: { exact: '' } }, {})).toBe(false);
    expect(matches({ present_match: true }, { 'x-h': '' })).toBe(true);
    expect(matches({ present_match: true }, {})).toBe(false);
    expect(matches({ present_match: false }, {})).toBe(true);
    expect(matches({}, { 'x-h': 'x' })).toBe(true);
    expect(matches({ string_match: { exact: 'a' }, invert_match: true }, { 'x-h': 'b' })).toBe(
      true,
    );
    expect(matches({ string_match: { exact: 'a' }, invert_match: true }, {})).toBe(false);
    expect(matches({ present_match: true, invert_match: true }, {})).toBe(true);
    expect(matches({ string_match: { exact: '' }, treat_missing_header_as_empty: true }, {})).toBe(
      true,
    );
    expect(matches({ exact_match: '' }, { 'x-h': 'anything' })).toBe(true);
    expect(matches({ prefix_match: 'a' }, { 'x-h': 'ab' })).toBe(true);
    expect(matches({ range_match: { start: 1, end: 10 } }, { 'x-h': '9' })).toBe(true);
    expect(matches({ range_match: { start: 1, end: 10 } }, { 'x-h': '10' })).toBe(false);
  });

  it('destination_cluster is the route cluster; source_cluster is node.cluster', () => {
    const model = http(
      [
        {
          match: { prefix: '/' },
          route: {
            cluster: 'orders-backend',
            rate_limits: [{ actions: [{ destination_cluster: {} }, { source_cluster: {} }] }],
          },
        },
      ],
      { node: { id: 'edge-1', cluster: 'edge' } },
    );
    expect(model.descriptorsFor(request('/'))).toEqual([
      [
        { key: 'destination_cluster', value: 'orders-backend' },
        { key: 'source_cluster', value: 'edge' },
      ],
    ]);
  });
});

describe('remote_address', () => {
  const address = (model: HttpRateLimit, r: HttpRequest) =>
    model.descriptorsFor(r)[0]?.[0]?.value ?? 'dropped';
  const forwarded = (xff: string, peer = '10.1.1.1') =>
    request('/', { 'x-forwarded-for': xff }, peer);
  const remote = [{ remote_address: {} }];

  it('is the peer, or nothing for a peer without an IP (the descriptor drops)', () => {
    const model = withActions(remote);
    expect(address(model, request('/'))).toBe('10.1.1.1');
    expect(address(model, { path: '/' })).toBe('dropped');
    expect(address(model, request('/', {}, '2001:DB8:0:0:0:0:0:1'))).toBe('2001:db8::1');
  });

  it('is the last X-Forwarded-For address by default (use_remote_address: false)', () => {
    const model = withActions(remote);
    expect(address(model, forwarded('1.1.1.1, 2.2.2.2'))).toBe('2.2.2.2');
    expect(address(model, forwarded('not-an-ip'))).toBe('10.1.1.1');
  });

  it('is the peer with use_remote_address: true, unless xff_num_trusted_hops trusts XFF', () => {
    const route = [
      { match: { prefix: '/' }, route: { cluster: 'c', rate_limits: [{ actions: remote }] } },
    ];
    const peer = http(route, { hcm: { use_remote_address: true } });
    expect(address(peer, forwarded('1.1.1.1, 2.2.2.2'))).toBe('10.1.1.1');
    const oneHop = http(route, { hcm: { use_remote_address: true, xff_num_trusted_hops: 1 } });
    expect(address(oneHop, forwarded('1.1.1.1, 2.2.2.2'))).toBe('2.2.2.2');
    const skipOne = http(route, { hcm: { xff_num_trusted_hops: 1 } });
    expect(address(skipOne, forwarded('1.1.1.1, 2.2.2.2'))).toBe('1.1.1.1');
  });
});

describe('routes', () => {
  const route = (match: object, value: string) => ({
    match,
    route: {
      cluster: 'c',
      rate_limits: [{ actions: [{ generic_key: { descriptor_value: value } }] }],
    },
  });
  const routed = (model: HttpRateLimit, path: string) =>
    model.descriptorsFor(request(path))[0]?.[0]?.value ?? 'none';

  it('takes the first route in order whose match fits', () => {
    const model = http([
      route({ prefix: '/orders' }, 'orders'),
      route({ prefix: '/orders/archive' }, 'never'),
      route({ path: '/health' }, 'health'),
      route({ safe_regex: { regex: '/users/[0-9]+' } }, 'user'),
      route({ path_separated_prefix: '/docs' }, 'docs'),
      route({ prefix: '/API', case_sensitive: false }, 'api'),
      route({ prefix: '/', headers: [{ name: 'x-beta', present_match: true }] }, 'beta'),
    ]);
    expect(routed(model, '/orders/archive/1')).toBe('orders');
    expect(routed(model, '/ordersX')).toBe('orders');
    expect(routed(model, '/health?full=1')).toBe('health');
    expect(routed(model, '/health/x')).toBe('none');
    expect(routed(model, '/users/42')).toBe('user');
    expect(routed(model, '/users/42/x')).toBe('none');
    expect(routed(model, '/docs/a')).toBe('docs');
    expect(routed(model, '/docsX')).toBe('none');
    expect(routed(model, '/api/v1')).toBe('api');
    expect(model.descriptorsFor(request('/other', { 'x-beta': '1' }))).toEqual([
      [{ key: 'generic_key', value: 'beta' }],
    ]);
    expect(model.trace(request('/other')).route).toBeUndefined();
  });

  it("uses the virtual host's rate_limits only for routes without their own, or with include_vh_rate_limits", () => {
    const vhost = { rate_limits: [{ actions: [{ generic_key: { descriptor_value: 'vh' } }] }] };
    const model = http(
      [
        route({ prefix: '/own' }, 'own'),
        {
          match: { prefix: '/both' },
          route: { ...route({}, 'both').route, include_vh_rate_limits: true },
        },
        { match: { prefix: '/' }, route: { cluster: 'c' } },
      ],
      { vhost },
    );
    const values = (path: string) => model.descriptorsFor(request(path)).map((d) => d[0]?.value);
    expect(values('/own')).toEqual(['own']);
    expect(values('/both')).toEqual(['both', 'vh']);
    expect(values('/other')).toEqual(['vh']);
  });

  it("applies only the entries of the filter's stage", () => {
    const model = http(
      [
        {
          match: { prefix: '/' },
          route: {
            cluster: 'c',
            rate_limits: [
              { actions: [{ generic_key: { descriptor_value: 'zero' } }] },
              { stage: 1, actions: [{ generic_key: { descriptor_value: 'one' } }] },
            ],
          },
        },
      ],
      { filter: { stage: 1 } },
    );
    expect(model.descriptorsFor(request('/'))).toEqual([[{ key: 'generic_key', value: 'one' }]]);
  });

  it('reads camelCase field names as Envoy does', () => {
    const model = http([
      {
        match: { prefix: '/' },
        route: {
          cluster: 'c',
          rateLimits: [
            { actions: [{ requestHeaders: { headerName: 'x-t', descriptorKey: 't' } }] },
          ],
        },
      },
    ]);
    expect(model.descriptorsFor(request('/', { 'x-t': 'v' }))).toEqual([
      [{ key: 't', value: 'v' }],
    ]);
  });
});

describe('refusals', () => {
  const refused = (config: string) => {
    try {
      parseEnvoyModel(config);
    } catch (err) {
      expect(err).toBeInstanceOf(EnvoyModelError);
      return (err as Error).message;
    }
    throw new Error('expected an EnvoyModelError');
  };
  const actions = (...list: object[]) =>
    bootstrap([
      { match: { prefix: '/' }, route: { cluster: 'c', rate_limits: [{ actions: list }] } },
    ]);

  it('names an unknown action', () => {
    expect(refused(actions({ remote_adress: {} }))).toMatch(
      /rate_limits\[0\]\.actions\[0\]\.remote_adress: unknown rate-limit action 'remote_adress'/,
    );
  });

  it('names a known action it does not model, and an unknown field', () => {
    expect(refused(actions({ masked_remote_address: {} }))).toMatch(
      /actions\[0\]\.masked_remote_address: the masked_remote_address action is not modelled/,
    );
    expect(
      refused(actions({ request_headers: { header_name: 'a', descriptor_key: 'b', x: 1 } })),
    ).toMatch(/request_headers\.x: this field is not modelled/);
  });

  it('refuses filters before the rate-limit filter and settings that change the answer', () => {
    const route = [{ match: { prefix: '/' }, route: { cluster: 'c' } }];
    const lua = { name: 'lua', typed_config: { '@type': 'type.googleapis.com/x.Lua' } };
    expect(refused(bootstrap(route, { httpFilters: [lua] }))).toMatch(
      /http_filters\[0\]: an HTTP filter before the rate-limit filter is not modelled/,
    );
    expect(
      refused(bootstrap(route, { filter: { enable_x_ratelimit_headers: 'DRAFT_VERSION_03' } })),
    ).toMatch(/enable_x_ratelimit_headers: 'DRAFT_VERSION_03' is not modelled/);
    expect(
      refused(
        bootstrap(route, { hcm: { path_with_escaped_slashes_action: 'UNESCAPE_AND_REDIRECT' } }),
      ),
    ).toMatch(/path_with_escaped_slashes_action: this field is not modelled/);
  });
});

describe('path normalization', () => {
  const both = { normalizePath: true, mergeSlashes: true };
  it.each([
    ['/reports/%65xport/q3', '/reports/export/q3'],
    ['/reports/./export', '/reports/export'],
    ['/a/b/../../reports/export', '/reports/export'],
    ['/../orders', '/orders'],
    ['/orders/..', '/'],
    ['/orders%2Fx', '/orders%2Fx'],
    ['/orders%2fx', '/orders%2Fx'],
    ['//reports///export?q=a//b', '/reports/export?q=a//b'],
  ])('normalizes %s to %s', (path, expected) => {
    expect(normalizedPath(path, both)).toBe(expected);
  });

  it('leaves the path alone when neither is set', () => {
    expect(normalizedPath('//a/./b/%65', { normalizePath: false, mergeSlashes: false })).toBe(
      '//a/./b/%65',
    );
  });
});

describe("Envoy's answer", () => {
  const model = withActions([tenant]);
  const headers = [
    { key: 'RateLimit-Policy', value: '"t";q=5;w=60' },
    { key: 'Retry-After', value: '12' },
  ];

  it('OVER_LIMIT: 429 with x-envoy-ratelimited and the headers tollgate added', () => {
    expect(model.answer({ overall_code: 'OVER_LIMIT', response_headers_to_add: headers })).toEqual({
      status: 429,
      headers: {
        'ratelimit-policy': '"t";q=5;w=60',
        'retry-after': '12',
        'x-envoy-ratelimited': 'true',
      },
      forwarded: false,
    });
  });

  it("OK: the upstream's answer, with the headers added as well", () => {
    expect(
      model.answer({ overall_code: 'OK', response_headers_to_add: headers.slice(0, 1) }),
    ).toEqual({
      status: 200,
      headers: { 'ratelimit-policy': '"t";q=5;w=60' },
      forwarded: true,
    });
  });

  it('a failed call lets the request through unless failure_mode_deny', () => {
    expect(model.answer(new Error('UNAVAILABLE'))).toEqual({
      status: 200,
      headers: {},
      forwarded: true,
    });
    const deny = http([{ match: { prefix: '/' }, route: { cluster: 'c' } }], {
      filter: { failure_mode_deny: true },
    });
    expect(deny.answer(new Error('UNAVAILABLE')).status).toBe(500);
    const custom = http([{ match: { prefix: '/' }, route: { cluster: 'c' } }], {
      filter: {
        failure_mode_deny: true,
        status_on_error: { code: 503 },
        rate_limited_status: { code: 302 },
        disable_x_envoy_ratelimited_header: true,
      },
    });
    expect(custom.answer(new Error('UNAVAILABLE')).status).toBe(503);
    // A rate_limited_status under 400 becomes 429.
    expect(custom.answer({ overall_code: 'OVER_LIMIT' })).toEqual({
      status: 429,
      headers: {},
      forwarded: false,
    });
  });

  it('send: no route is 404 without a call; no descriptor is 200 without a call', async () => {
    const calls: unknown[] = [];
    const check = async (r: unknown) => {
      calls.push(r);
      return { overall_code: 'OVER_LIMIT' as const };
    };
    const routed = http([
      { match: { prefix: '/api' }, route: { cluster: 'c', rate_limits: [{ actions: [tenant] }] } },
    ]);
    expect((await routed.send(request('/other'), check)).status).toBe(404);
    expect((await routed.send(request('/api'), check)).status).toBe(200);
    expect(calls).toEqual([]);
    expect((await routed.send(request('/api', { 'x-tenant-id': 'a' }), check)).status).toBe(429);
    expect(calls).toEqual([
      { domain: 'edge', descriptors: [{ entries: [{ key: 'tenant', value: 'a' }] }] },
    ]);
  });
});

describe('the TCP filter', () => {
  const tcp = (config: object) =>
    stringify({
      static_resources: {
        listeners: [
          {
            name: 'tcp',
            filter_chains: [
              {
                filters: [
                  {
                    name: 'rl',
                    typed_config: { '@type': TYPES.networkRateLimit, stat_prefix: 's', ...config },
                  },
                  { name: 'proxy', typed_config: { '@type': TYPES.tcpProxy, cluster: 'c' } },
                ],
              },
            ],
          },
        ],
      },
    });

  it('sends its static descriptors once per connection; OVER_LIMIT closes it', () => {
    const model = parseEnvoyModel(
      tcp({ domain: 'edge', descriptors: [{ entries: [{ key: 'listener', value: 'tcp' }] }] }),
    );
    const [filter] = model.tcp;
    expect(filter!.requestFor()).toEqual({
      domain: 'edge',
      descriptors: [{ entries: [{ key: 'listener', value: 'tcp' }] }],
    });
    expect(filter!.answer({ overall_code: 'OVER_LIMIT' })).toBe('closed');
    expect(filter!.answer({ overall_code: 'OK' })).toBe('open');
    expect(filter!.answer(new Error('timeout'))).toBe('open');
    expect(model.shapes().map((s) => formatShape(s.entries))).toEqual(['[listener=tcp]']);
  });

  it('refuses a substitution format in a descriptor value', () => {
    const config = tcp({
      domain: 'e',
      descriptors: [{ entries: [{ key: 'a', value: '%DOWNSTREAM_REMOTE_ADDRESS%' }] }],
    });
    expect(() => parseEnvoyModel(config)).toThrow(/a substitution format is not modelled/);
  });
});

describe('shapes and probe requests', () => {
  it('every shape a literal config declares is sent for some probe request', () => {
    const model = http([
      {
        match: { prefix: '/orders' },
        route: {
          cluster: 'c',
          rate_limits: [
            {
              actions: [
                tenant,
                { generic_key: { descriptor_key: 'route', descriptor_value: 'orders' } },
              ],
            },
          ],
        },
      },
      {
        match: { prefix: '/' },
        route: {
          cluster: 'c',
          rate_limits: [
            {
              actions: [
                tenant,
                {
                  header_value_match: {
                    descriptor_key: 'export',
                    descriptor_value: 'reports',
                    headers: [{ name: ':path', string_match: { prefix: '/reports/export' } }],
                  },
                },
              ],
            },
          ],
        },
      },
    ]);
    const sent = new Set(
      model
        .probeRequests()
        .flatMap((r) => model.trace(r).descriptors)
        .map((d) => `${d.source} ${d.entries.map((e) => e.key).join(',')}`),
    );
    for (const shape of model.shapes()) {
      expect(sent).toContain(`${shape.source} ${shape.entries.map((e) => e.key).join(',')}`);
    }
    expect(model.shapes().map((s) => formatShape(s.entries))).toEqual([
      '[tenant=<request>, route=orders]',
      '[tenant=<request>, export=reports]',
    ]);
    expect(model.headersFor('tenant')).toEqual(['x-tenant-id']);
  });
});
