/**
 * tollgate's public API: the client for services that call tollgate directly, and the service
 * itself for embedding in another process (`createService(readSettings())`).
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
export { RulesError, SettingsError } from './errors.js';
export { createService, type Service, type ServiceOptions } from './service.js';
export { readSettings, type Settings } from './settings.js';
