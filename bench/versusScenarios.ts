/**
 * The side-by-side runs with envoyproxy/ratelimit: rules it accepts (no `algorithm`, `window` or
 * `burst`), loaded by it and by both tollgates, and the two requests of the comparison.
 */
import { ADMISSION_LIMIT, type Scenario } from './scenarios.js';

const DOMAIN = 'versus';

/** Far above what any run sends, and within the reference's uint32. */
const ROOMY = 4_000_000_000;

export const VERSUS_RULES_YAML = `# Written by bench/versusScenarios.ts for npm run bench.
domain: ${DOMAIN}
descriptors:
  - key: ready
    rate_limit: {unit: hour, requests_per_unit: ${ROOMY}}
  - key: hot
    value: one
    rate_limit: {unit: hour, requests_per_unit: ${ROOMY}}
  - key: tenant
    value: acme
    rate_limit: {unit: hour, requests_per_unit: ${ROOMY}}
    descriptors:
      - key: route
        value: /orders
        rate_limit: {unit: hour, requests_per_unit: ${ROOMY}}
  - key: remote_address
    rate_limit: {unit: hour, requests_per_unit: ${ROOMY}}
  - key: limited
    rate_limit: {unit: year, requests_per_unit: ${ADMISSION_LIMIT}}
`;

/**
 * The over-admission check's request: a counter per service, since the services share one Redis
 * and two tollgates with fixed windows would otherwise share a key. Its window is a year, so that
 * a run meets a window's end (which would split its count) once a year at most.
 */
export function admissionRequest(service: string): Scenario['request'] {
  return { domain: DOMAIN, descriptors: [{ entries: [{ key: 'limited', value: service }] }] };
}

export const VERSUS_READY: Scenario['request'] = {
  domain: DOMAIN,
  descriptors: [{ entries: [{ key: 'ready', value: 'probe' }] }],
};

export const VERSUS_SCENARIOS: Scenario[] = [
  {
    name: 'one-descriptor',
    title: 'one descriptor, one hot key',
    request: { domain: DOMAIN, descriptors: [{ entries: [{ key: 'hot', value: 'one' }] }] },
  },
  {
    name: 'three-descriptors',
    title: 'three descriptors: tenant, tenant+route, IP',
    request: {
      domain: DOMAIN,
      descriptors: [
        { entries: [{ key: 'tenant', value: 'acme' }] },
        {
          entries: [
            { key: 'tenant', value: 'acme' },
            { key: 'route', value: '/orders' },
          ],
        },
        { entries: [{ key: 'remote_address', value: '10.1.2.3' }] },
      ],
    },
  },
];
