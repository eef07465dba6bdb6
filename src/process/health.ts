import { StoreError } from '../core/errors.js';
import type { Logger } from '../core/logger.js';
import type { Store } from '../store/Store.js';

/**
 * Whether this instance can decide checks, as health checks ask it: the store as the probe last
 * found it, the rules, and whether the servers listen or drain.
 *
 * The probe runs a check's whole path (see Store.probe), so a Redis user without a command checks
 * need is found, not only an unreachable Redis. With FAILURE_MODE=error no check can be answered
 * then, so health says NOT_SERVING and Envoy's health checking can route around this instance.
 * With allow or deny, the service still gives its configured answer and stays SERVING. The
 * reason names the cause.
 */
export interface Health {
  /** What health checks answer now. */
  state(): HealthState;
  /** Probes the store now and every `intervalMs` after. */
  start(intervalMs: number): Promise<void>;
  /** Both servers listen: until then health says NOT_SERVING ("starting"). */
  listening(): void;
  /** NOT_SERVING from now on, and no more probes. */
  drain(): void;
}

export interface HealthState {
  serving: boolean;
  reason: string;
}

export interface HealthOptions {
  store: Store;
  failureMode: 'error' | 'allow' | 'deny';
  /** CLOCK=local: the clock the probe decides on; undefined: the store's own. */
  clock: (() => number) | undefined;
  /** Why the rules keep health NOT_SERVING, or undefined. */
  rulesProblem: () => string | undefined;
  logger: Logger;
  /** Called when `serving` may have changed. */
  onChange: () => void;
}

/** Store errors that mean Redis cannot be reached or cannot serve now; the rest are refusals. */
const UNREACHABLE_KINDS = new Set(['timeout', 'connection', 'unavailable']);

export function createHealth(options: HealthOptions): Health {
  const { failureMode, logger } = options;
  let storeProblem: StoreError | undefined;
  let draining = false;
  // Until both servers listen: a process whose HTTP port turns out to be taken exits, and must
  // not have said SERVING on its gRPC port a moment before.
  let listening = false;
  let probing = false;
  let timer: NodeJS.Timeout | undefined;

  const probe = async () => {
    if (probing) return;
    probing = true;
    const problem = await options.store.probe(options.clock?.()).then(
      () => undefined,
      (error: unknown) => (error instanceof StoreError ? error : undefined),
    );
    probing = false;
    if (problem?.message === storeProblem?.message) return;
    const before = storeProblem;
    storeProblem = problem;
    logProbe(logger, problem, failureMode);
    if ((before === undefined) !== (problem === undefined)) options.onChange();
  };

  return {
    state() {
      if (draining) return { serving: false, reason: 'NOT_SERVING: draining' };
      if (!listening) return { serving: false, reason: 'NOT_SERVING: starting' };
      const rules = options.rulesProblem();
      if (rules !== undefined) return { serving: false, reason: rules };
      return storeHealth(storeProblem, failureMode);
    },
    async start(intervalMs) {
      await probe();
      timer = setInterval(() => void probe(), intervalMs);
      timer.unref();
    },
    listening() {
      listening = true;
      options.onChange();
    },
    drain() {
      draining = true;
      clearInterval(timer);
      options.onChange();
    },
  };
}

function storeHealth(problem: StoreError | undefined, failureMode: string): HealthState {
  if (problem === undefined) return { serving: true, reason: 'OK' };
  const what = UNREACHABLE_KINDS.has(problem.kind) ? 'store unreachable' : 'store refuses checks';
  if (failureMode === 'error') {
    return {
      serving: false,
      reason: `NOT_SERVING: ${what} (FAILURE_MODE=error): ${problem.message}`,
    };
  }
  return {
    serving: true,
    reason: `OK: ${what}, answering per FAILURE_MODE=${failureMode}: ${problem.message}`,
  };
}

function logProbe(logger: Logger, problem: StoreError | undefined, failureMode: string): void {
  if (problem === undefined) {
    logger.info('store decides checks again');
    return;
  }
  logger.error(
    { kind: problem.kind, failureMode, reason: problem.message },
    UNREACHABLE_KINDS.has(problem.kind)
      ? 'store unreachable'
      : 'store refuses checks: no check can be decided until this is fixed',
  );
}
