/**
 * The few errors tollgate raises. Over-limit is a decision, never an error. `grpc/status.ts` is
 * the one place that maps these to gRPC status codes.
 */

/** The caller sent a request tollgate cannot decide: answered INVALID_ARGUMENT. */
export class InvalidRequestError extends Error {
  override readonly name = 'InvalidRequestError';
}

/** A caller went past a bound of the service (buckets a stream holds): RESOURCE_EXHAUSTED. */
export class ResourceLimitError extends Error {
  override readonly name = 'ResourceLimitError';
}

/** The store could not decide in time, or at all: answered per FAILURE_MODE. */
export class StoreError extends Error {
  override readonly name = 'StoreError';
  constructor(
    message: string,
    /** A short label for logs and metrics: timeout, connection, script, ... */
    readonly kind: string,
    options?: { cause?: unknown },
  ) {
    super(message, options);
  }
}

/**
 * No rules are loaded yet: with CONFIG_TYPE=GRPC_XDS_SOTW and FORCE_START_WITHOUT_INITIAL_CONFIG,
 * the service serves before the management server has sent any. Answered UNAVAILABLE.
 */
export class NoRulesError extends Error {
  override readonly name = 'NoRulesError';
}

/** A rules file is invalid. The message names the file, the path in it and the key. */
export class RulesError extends Error {
  override readonly name = 'RulesError';
}

/** A setting has a bad value. The message names the setting. */
export class SettingsError extends Error {
  override readonly name = 'SettingsError';
}
