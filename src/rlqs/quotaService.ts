/**
 * Envoy's Rate Limit Quota Service, composed from the service's own parts: the rules in force,
 * the store its classic checks use, and demand kept beside the counters (on the store's Redis
 * connection, or in memory without Redis), so that classic clients and RLQS clients share one
 * rule set and one set of counters.
 */
import type { PlanPolicy } from '../decision/plan.js';
import type { RuleSet } from '../rules/types.js';
import type { RedisAccess } from '../store/redisStore.js';
import type { Store } from '../store/Store.js';
import { createAdmissionWatch } from './admissions.js';
import { createMemoryDemand, createRedisDemand } from './demand.js';
import type { RlqsSettings } from './rlqsSettings.js';
import { createSession } from './session.js';
import { createRlqsService, type RlqsEvent, type RlqsService } from './stream.js';

export interface QuotaServiceOptions {
  settings: RlqsSettings;
  rules: () => RuleSet;
  store: Store;
  /** The store's Redis connection; undefined: the in-memory store, and demand in memory. */
  redis: RedisAccess | undefined;
  /** The same plan as the classic checks', so that both reach the same counters. */
  plan: PlanPolicy;
  /** CLOCK=local: the service's clock; undefined: the store's. */
  clock: (() => number) | undefined;
  /** The in-memory demand's clock (the service's). */
  memoryClock: () => number;
  onEvent?(event: RlqsEvent): void;
  onInternalError?(error: unknown): void;
}

/** Over-admission is followed for at most this many rule counters at once. */
const MAX_WATCHED_POOLS = 100_000;

export function createQuotaService(options: QuotaServiceOptions): RlqsService {
  const { settings } = options;
  const demandOptions = { maxConsumers: settings.maxConsumersPerPool };
  const demand = options.redis
    ? createRedisDemand(options.redis, demandOptions)
    : createMemoryDemand(demandOptions, options.memoryClock);
  const admissions = createAdmissionWatch(MAX_WATCHED_POOLS);
  const onOverAdmitted = (requests: number) =>
    options.onEvent?.({ kind: 'over_admitted', requests });
  return createRlqsService({
    session: (streamId) =>
      createSession({
        streamId,
        rules: options.rules,
        store: options.store,
        demand,
        plan: options.plan,
        clock: options.clock,
        unmatched: settings.unmatched,
        ttlFloorMs: settings.ttlFloorMs,
        maxBuckets: settings.maxBucketsPerStream,
        admissions,
        onOverAdmitted,
      }),
    maxStreams: settings.maxStreams,
    maxBucketsPerStream: settings.maxBucketsPerStream,
    maxReportsPerSecond: settings.maxReportsPerSecond,
    staleMs: settings.staleMs,
    maxQueuedBytes: settings.maxQueuedBytes,
    maxQueuedBytesTotal: settings.maxQueuedBytesTotal,
    unreadMs: settings.unreadMs,
    onEvent: options.onEvent,
    onInternalError: options.onInternalError,
  });
}
