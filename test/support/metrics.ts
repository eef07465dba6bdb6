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

/**
 * One sample of a metrics exposition: the series `name` with exactly these labels (none by
 * default); undefined when it is absent.
 */
export function metricValue(
  text: string,
  name: string,
  labels: Record<string, string> = {},
): number | undefined {
  const wanted = Object.entries(labels)
    .map(([key, value]) => `${key}="${value}"`)
    .join(',');
  const head = wanted === '' ? name : `${name}{${wanted}}`;
  for (const line of text.split('\n')) {
    if (line.startsWith(`${head} `)) return Number(line.slice(head.length + 1));
  }
  return undefined;
}
