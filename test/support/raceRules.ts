/**
 * Rules for the exactness tests: one key per algorithm (`fixed`, `sliding`, `bucket`), each
 * allowing `limit` an hour, so that no window boundary falls inside a test. `extra` adds
 * descriptors of the test's own, as YAML list items.
 */
export function raceRules(domain: string, limit: number, extra = ''): string {
  return `
domain: ${domain}
descriptors:
  - key: fixed
    rate_limit: {unit: hour, requests_per_unit: ${limit}, algorithm: fixed_window}
  - key: sliding
    rate_limit: {unit: hour, requests_per_unit: ${limit}, algorithm: sliding_window}
  - key: bucket
    rate_limit: {unit: hour, requests_per_unit: ${limit}, algorithm: token_bucket}
${extra}`;
}
