/**
 * @tollgate/client: a typed client for services that ask tollgate directly, without Envoy in
 * front.
 */
export {
  createTollgateClient,
  type CheckRequest,
  type CheckResult,
  type DescriptorEntries,
  type DescriptorRequest,
  type FallbackResult,
  type ServiceResult,
  type TollgateClient,
  type TollgateClientOptions,
} from './client.js';
export { TollgateError, TollgateRequestError, TollgateUnavailableError } from './errors.js';
export type { Code, CurrentLimit, DescriptorStatus, Header, ReportedUnit } from './types.js';
export {
  createRateLimitClient,
  type RateLimitClient,
  type RateLimitRequestObject,
  type RateLimitResponseObject,
} from './rls.js';
