/**
 * A labelled counter of a running tollgate's `GET /metrics`, by label value: for example
 * `counterByLabel(url, 'tollgate_store_errors_total', 'kind')` gives `{ wrong_type: 30, ... }`.
 */
export async function counterByLabel(
  httpUrl: string,
  metric: string,
  label: string,
): Promise<Record<string, number>> {
  const text = await (await fetch(`${httpUrl}/metrics`)).text();
  const counts: Record<string, number> = {};
  const line = new RegExp(`^${metric}\\{${label}="([^"]+)"\\} (\\d+)`, 'gm');
  for (const [, value, n] of text.matchAll(line)) counts[value as string] = Number(n);
  return counts;
}
