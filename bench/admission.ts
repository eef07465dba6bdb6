import type { Ghz } from './ghz.js';
import type { Plan } from './plan.js';
import { check, openClients } from './rlsClient.js';
import {
  ADMISSION_DESCRIPTOR,
  ADMISSION_LIMIT,
  DOMAIN,
  HEADLINE,
  type Scenario,
} from './scenarios.js';
import type { Service } from './services.js';

/**
 * No over-admission under load: while ghz drives the service, many concurrent requests on
 * several connections go to one key with a limit of N; exactly N may be allowed. ghz cannot do
 * this part, since its report has gRPC statuses but not the decision inside an OK reply.
 */
export interface AdmissionResult {
  service: string;
  limit: number;
  requests: number;
  concurrency: number;
  channels: number;
  allowed: number;
  denied: number;
  /** Calls that failed, by gRPC status name. */
  failed: Record<string, number>;
  /** allowed === limit; fewer is possible only when calls failed. */
  exact: boolean;
  overAdmitted: boolean;
}

/** The bench's own rules by default; the comparison's rules name requests of their own. */
export interface AdmissionRequests {
  /** The request to the key limited to ADMISSION_LIMIT. */
  request: Scenario['request'];
  /** The load ghz sends meanwhile. */
  load: Scenario['request'];
}

const BENCH_REQUESTS: AdmissionRequests = {
  request: { domain: DOMAIN, descriptors: [{ entries: [ADMISSION_DESCRIPTOR] }] },
  load: HEADLINE.request,
};

export async function checkAdmission(
  service: Service,
  ghz: Ghz,
  plan: Plan['admission'],
  requests: AdmissionRequests = BENCH_REQUESTS,
): Promise<AdmissionResult> {
  const background = ghz
    .run({
      address: service.address,
      request: requests.load,
      seconds: plan.loadSeconds,
      concurrency: 20,
      connections: 2,
      timeoutMs: 5_000,
    })
    // Settled into a value at once: a rejection must wait for the check, not crash the harness.
    .then(
      () => undefined,
      (error: unknown) => error,
    );
  // Let the background load get going first.
  await new Promise((resolve) => setTimeout(resolve, 300));
  const clients = openClients(service.address, plan.channels);
  const { request } = requests;
  let allowed = 0;
  let denied = 0;
  const failed: Record<string, number> = {};
  let next = 0;
  // `concurrency` calls in flight at any time, spread over the channels.
  const lane = async (index: number) => {
    while (next < plan.requests) {
      next += 1;
      const outcome = await check(clients[index % clients.length]!, request);
      if (outcome === 'OK') allowed += 1;
      else if (outcome === 'OVER_LIMIT') denied += 1;
      else failed[outcome] = (failed[outcome] ?? 0) + 1;
    }
  };
  try {
    await Promise.all(Array.from({ length: plan.concurrency }, (_, index) => lane(index)));
  } finally {
    for (const client of clients) client.close();
  }
  const loadError = await background;
  if (loadError !== undefined) throw loadError;
  return {
    service: service.name,
    limit: ADMISSION_LIMIT,
    requests: plan.requests,
    concurrency: plan.concurrency,
    channels: plan.channels,
    allowed,
    denied,
    failed,
    exact: allowed === ADMISSION_LIMIT,
    overAdmitted: allowed > ADMISSION_LIMIT,
  };
}
