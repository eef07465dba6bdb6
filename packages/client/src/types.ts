/**
 * A decision as tollgate reports it, per descriptor. The service builds its answers from these
 * same types, so the client's results and the service's decisions cannot drift apart.
 */

export type Code = 'OK' | 'OVER_LIMIT';

/** Units reported back in `current_limit`; `unknown` marks a window that is not one whole unit. */
export type ReportedUnit =
  'unknown' | 'second' | 'minute' | 'hour' | 'day' | 'week' | 'month' | 'year';

export interface CurrentLimit {
  requestsPerUnit: number;
  unit: ReportedUnit;
  name: string;
}

export interface DescriptorStatus {
  code: Code;
  currentLimit?: CurrentLimit;
  /** Whole units left after this decision. */
  limitRemaining: number;
  /** Milliseconds until the counter resets; absent when there is no limit or it can never fit. */
  durationUntilResetMs?: number;
}

export interface Header {
  key: string;
  value: string;
}
