/**
 * What the bench sends: the rules file every tollgate under test loads, and one ghz payload per
 * scenario. Each scenario has its own descriptor key, so no scenario's counters are touched by
 * another's traffic.
 */
export const DOMAIN = 'bench';

/** Far above what any run sends (a full run sends a few million), so allowed stays allowed. */
const ROOMY = 4_000_000_000;

/** The over-admission check: one key, this many allowed per day, hit far more often than that. */
export const ADMISSION_LIMIT = 1_000;
export const ADMISSION_DESCRIPTOR = { key: 'limited', value: 'one' };

const ABUSIVE_LIMIT = 10;

// A sliding window per day for the admission key: the store is fresh on every run, so the
// previous window is empty and exactly ADMISSION_LIMIT fit, whatever the time of day.
export const RULES_YAML = `# Written by bench/scenarios.ts for npm run bench.
domain: ${DOMAIN}
descriptors:
  - key: ready
    rate_limit: {unit: hour, requests_per_unit: ${ROOMY}}
  - key: hot
    value: one
    rate_limit: {unit: hour, requests_per_unit: ${ROOMY}, algorithm: sliding_window}
  - key: user
    rate_limit: {unit: hour, requests_per_unit: ${ROOMY}, algorithm: sliding_window}
  - key: tenant
    value: acme
    rate_limit: {unit: hour, requests_per_unit: ${ROOMY}}
    descriptors:
      - key: route
        value: /orders
        rate_limit: {unit: hour, requests_per_unit: ${ROOMY}}
  - key: remote_address
    rate_limit: {unit: hour, requests_per_unit: ${ROOMY}}
  - key: bucket
    value: one
    rate_limit: {unit: hour, requests_per_unit: ${ROOMY}, algorithm: token_bucket}
  - key: fixed
    value: one
    rate_limit: {unit: hour, requests_per_unit: ${ROOMY}, algorithm: fixed_window}
  - key: abusive
    value: one
    rate_limit: {unit: hour, requests_per_unit: ${ABUSIVE_LIMIT}}
  - key: ${ADMISSION_DESCRIPTOR.key}
    value: ${ADMISSION_DESCRIPTOR.value}
    rate_limit: {unit: day, requests_per_unit: ${ADMISSION_LIMIT}, algorithm: sliding_window}
`;

export interface Entry {
  key: string;
  value: string;
}

export interface Scenario {
  name: string;
  /** One line for the report. */
  title: string;
  /** The RateLimitRequest as ghz's JSON; values may hold ghz template actions. */
  request: { domain: string; descriptors: { entries: Entry[] }[] };
}

function request(...descriptors: Entry[][]): Scenario['request'] {
  return { domain: DOMAIN, descriptors: descriptors.map((entries) => ({ entries })) };
}

/** Touches the store, so that "ready" means the whole path to Redis works. */
export const READY_REQUEST = request([{ key: 'ready', value: 'probe' }]);

export const SCENARIOS: Scenario[] = [
  {
    name: 'one-descriptor',
    title: 'one descriptor, one hot key, sliding_window',
    request: request([{ key: 'hot', value: 'one' }]),
  },
  {
    name: 'three-descriptors',
    title: 'three descriptors: tenant, tenant+route, IP',
    request: request(
      [{ key: 'tenant', value: 'acme' }],
      [
        { key: 'tenant', value: 'acme' },
        { key: 'route', value: '/orders' },
      ],
      [{ key: 'remote_address', value: '10.1.2.3' }],
    ),
  },
  {
    name: 'distinct-keys',
    title: '100k distinct keys, one per request in turn',
    // sprig's `mod` in ghz's templates: request n goes to counter u(n mod 100000).
    request: request([{ key: 'user', value: 'u{{mod .RequestNumber 100000}}' }]),
  },
  {
    name: 'token-bucket',
    title: 'one hot key, token_bucket',
    request: request([{ key: 'bucket', value: 'one' }]),
  },
  {
    name: 'fixed-window',
    title: 'one hot key, fixed_window',
    request: request([{ key: 'fixed', value: 'one' }]),
  },
  {
    name: 'abusive-tenant',
    title: `mostly denied: one hot key limited to ${ABUSIVE_LIMIT} an hour`,
    request: request([{ key: 'abusive', value: 'one' }]),
  },
];

/** The scenario of the headline throughput and latency tables. */
export const HEADLINE = SCENARIOS[0]!;
