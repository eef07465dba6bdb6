/**
 * Envoy's Rate Limit Quota Service, composed from the service's own parts: the rules in force,
 * the store its classic checks use, and demand kept beside the counters (store/demand.ts), so
 * that classic clients and RLQS clients share one rule set and one set of counters.
 */
import type { PlanPolicy } from '../decision/plan.js';
import type { RuleSet } from '../rules/types.js';
import type { DemandOptions, DemandStore } from '../store/demand.js';
import type { Store } from '../store/Store.js';
import type { RlqsSettings } from './rlqsSettings.js';
import type { RlqsEvent } from './events.js';
import { createSession, type Session, type SessionOptions } from './session.js';

export interface QuotaServiceOptions {
  settings: RlqsSettings;
  rules: () => RuleSet;
  store: Store;
  /** The demand store beside the store's counters (OpenedStore.openDemand). */
  openDemand(options: DemandOptions): DemandStore;
  /** The same plan as the classic checks', so that both reach the same counters. */
  plan: PlanPolicy;
  /** CLOCK=local: the service's clock; undefined: the store's. */
  clock: (() => number) | undefined;
  /** Told of requests admitted past a rule's limit, for metrics. */
  onEvent?(event: RlqsEvent): void;
}

/** RLQS without its transport: a session for each stream, which answers its reports. */
export interface QuotaService {
  /**
   * A new stream's session, under a name unique across instances; `push` sends actions unasked
   * (SessionOptions.push).
   */
  session(streamId: string, push?: SessionOptions['push']): Session;
}

export function createQuotaService(options: QuotaServiceOptions): QuotaService {
  const { settings } = options;
  const demand = options.openDemand({ maxConsumers: settings.maxConsumersPerPool });
  const onOverAdmitted = (requests: number) =>
    options.onEvent?.({ kind: 'over_admitted', requests });
  return {
    session: (streamId, push) =>
      createSession({
        streamId,
        push,
        rules: options.rules,
        store: options.store,
        demand,
        plan: options.plan,
        clock: options.clock,
        unmatched: settings.unmatched,
        ttlFloorMs: settings.ttlFloorMs,
        maxBuckets: settings.maxBucketsPerStream,
        onOverAdmitted,
      }),
  };
}
