/**
 * tollgate's public API: the client for services that call tollgate directly.
 *
 * The service itself (createService, readSettings) is left out on purpose: importing it loads
 * ioredis, pino, prom-client and OpenTelemetry, about three times the client's start-up cost,
 * which every caller of the client would pay. Embedding wants its own entry point.
 */
export {
  createTollgateClient,
  TollgateError,
  TollgateRequestError,
  TollgateUnavailableError,
  type CheckRequest,
  type CheckResult,
  type DescriptorEntries,
  type FallbackResult,
  type ServiceResult,
  type TollgateClient,
  type TollgateClientOptions,
} from './client.js';
export type { Code, CurrentLimit, DescriptorStatus, Header, ReportedUnit } from './check.js';
