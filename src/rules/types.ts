/**
 * The loaded rules: what `loadRules` builds from YAML and what `matchRule` walks per request.
 * Plain data, immutable once built, so a reload can swap a whole `RuleSet` atomically.
 */
import type { JsonValue } from '../core/check.js';
import type { Calendar } from './calendar.js';

export type { JsonValue };

export type Algorithm = 'fixed_window' | 'sliding_window' | 'token_bucket';

export const ALGORITHMS: readonly Algorithm[] = ['sliding_window', 'token_bucket', 'fixed_window'];

/** Units of the rules file. MONTH is 30 days and YEAR 365 days, as in the reference. */
export type Unit = 'second' | 'minute' | 'hour' | 'day' | 'week' | 'month' | 'year';

export const UNIT_SECONDS: Readonly<Record<Unit, number>> = {
  second: 1,
  minute: 60,
  hour: 3_600,
  day: 86_400,
  week: 604_800,
  month: 2_592_000,
  year: 31_536_000,
};

/**
 * The longest window a rule may have: a leap year, as a calendar year may be. It keeps the
 * scripts' integer arithmetic exact.
 */
export const MAX_WINDOW_SECONDS = 366 * UNIT_SECONDS.day;

/** A limit, resolved: every default applied, every derived number computed at load time. */
export interface Limit {
  requestsPerUnit: number;
  /** The whole unit this window equals, or undefined for a window such as 30s or 90m. */
  unit: Unit | undefined;
  windowMs: number;
  algorithm: Algorithm;
  /** Token bucket capacity; equals `requestsPerUnit` for the window algorithms. */
  burst: number;
  /** The rule's `name`, or "" when it has none. */
  name: string;
  /**
   * tollgate's `overdraw`: consume even when over, recorded in full past the limit, for costs
   * reported after the fact.
   */
  overdraw: boolean;
  /**
   * tollgate's `calendar` and `time_zone`: a fixed window on the calendar of a zone (see
   * calendar.ts). `windowMs` is then the period's nominal length, for what reports a window.
   */
  calendar?: Calendar;
}

/** One `descriptors` item of the rules file. */
export interface RuleNode {
  key: string;
  /** The configured value: exact, a '*' pattern, or undefined for the bare key. */
  value: string | undefined;
  /** Where the node sits in its file, e.g. `descriptors[0].descriptors[1]`. */
  path: string;
  file: string;
  limit: Limit | undefined;
  unlimited: boolean;
  children: RuleLevel;
  /** The node one level up, or undefined at the top. */
  parent: RuleNode | undefined;
  /** This level of the reference's stats key: `key`, or `key_value` with the configured value. */
  metricPart: string;
  /** Decided and counted, but never blocks and always reports OK (the reference's `shadow_mode`). */
  shadowMode: boolean;
  /** Denies only when every quota descriptor of the request is over (`quota_mode`). */
  quotaMode: boolean;
  /** Metrics carry the request's value for a bare key at the last level (`detailed_metric`). */
  detailedMetric: boolean;
  /** Metrics carry the request's value at this level (`value_to_metric`). */
  valueToMetric: boolean;
  /** Every value matching this wildcard shares one counter (`share_threshold`). */
  shareThreshold: boolean;
  /**
   * Names of limits in the same domain that this rule replaces (the reference's `replaces`), for
   * a limited and an unlimited rule alike.
   */
  replaces: readonly string[];
  /** Returned in `dynamic_metadata` when RESPONSE_DYNAMIC_METADATA is on (`metadata`). */
  metadata: Readonly<Record<string, JsonValue>> | undefined;
}

/** A compiled '*' pattern; '*' matches any run of characters, including none. */
export interface WildcardRule {
  key: string;
  /** The pattern split on '*': the value starts with the first part, ends with the last, and holds the rest in order. */
  parts: readonly string[];
  node: RuleNode;
}

/** The rules at one depth, indexed for the reference's precedence: exact, then wildcard (file order), then bare key. */
export interface RuleLevel {
  exact: Map<string, Map<string, RuleNode>>;
  wildcards: WildcardRule[];
  bare: Map<string, RuleNode>;
}

export interface DomainRules {
  domain: string;
  /** The entry key that names the tenant, when the file sets `tenant_key`. */
  tenantKey: string | undefined;
  file: string;
  root: RuleLevel;
}

export interface RuleSet {
  domains: ReadonlyMap<string, DomainRules>;
}
