// What README and docs/ state must agree with the repository and with each other: one Go
// version, no paragraph said twice, no test named to users, and a metrics table that lists what
// /metrics serves.
import { readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { createMetrics, createMetricsAggregator } from '../../src/observability/metrics.js';
import type { LocalCacheStats } from '../../src/store/overLimitCache.js';

const PAGES = [
  'README.md',
  ...readdirSync('docs')
    .filter((name) => name.endsWith('.md'))
    .map((name) => join('docs', name)),
];

const GO_MODULES = [
  'deploy/validate',
  'envoy/validate',
  'test/envoy-gateway/validate',
  'test/grpc-go/client',
  'test/reference-suite',
  'test/xds/server',
];

/** The text outside fenced code blocks. */
function prose(markdown: string): string {
  return markdown.replace(/^```[^]*?^```/gm, '');
}

describe('the Go version', () => {
  it('is the same in every page and every go.mod', () => {
    const named = new Map<string, string[]>();
    const note = (version: string, where: string) =>
      named.set(version, [...(named.get(version) ?? []), where]);
    for (const page of PAGES) {
      for (const [, version] of readFileSync(page, 'utf8').matchAll(/\bGo (1\.\d+)/g)) {
        note(version!, page);
      }
    }
    for (const dir of GO_MODULES) {
      const mod = readFileSync(join(dir, 'go.mod'), 'utf8');
      const [, version] = /^go (1\.\d+)/m.exec(mod) ?? [];
      note(version ?? 'none', `${dir}/go.mod`);
    }
    expect([...named.keys()], JSON.stringify(Object.fromEntries(named))).toEqual(['1.26']);
  });
});

describe('paragraphs', () => {
  it.each(PAGES)('%s says no paragraph twice', (page) => {
    const seen = new Set<string>();
    const repeated: string[] = [];
    for (const paragraph of prose(readFileSync(page, 'utf8')).split(/\n\s*\n/)) {
      const text = paragraph.replace(/\s+/g, ' ').trim();
      if (text.length < 40 || text.startsWith('|') || text.startsWith('#')) continue;
      if (seen.has(text)) repeated.push(text);
      seen.add(text);
    }
    expect(repeated).toEqual([]);
  });
});

// The pages for users say what holds for them, not how tollgate is tested. docs/development.md is
// for contributors and names the tests they run.
const USER_PAGES = PAGES.filter((page) => page !== 'docs/development.md');

describe('pages for users', () => {
  it.each(USER_PAGES)('%s names no test file and no test machine', (page) => {
    const text = readFileSync(page, 'utf8');
    const found = [
      ...text.matchAll(/\btest\/[\w./-]+|\btest machines?\b|machines that test|the tests? below/gi),
    ].map(([match]) => match);
    expect(found).toEqual([]);
  });
});

/** The rows of operations.md's Metrics section: series names, and the text of the labels cell. */
function documentedSeries(): { name: string; labels: string }[] {
  const page = readFileSync('docs/operations.md', 'utf8');
  const section = /^## Metrics$([^]*?)^## /m.exec(page)?.[1] ?? '';
  return [...section.matchAll(/^\| (.+?) \|(.*)$/gm)].flatMap(([, first, rest]) => {
    const cells = rest!.split(' | ');
    // The tables' second cell is the labels, or the type with the labels after it.
    const labels = (/^ *(counter|gauge|histogram)? *$/.test(cells[0]!) ? cells[1] : cells[0]) ?? '';
    return [...first!.matchAll(/`([a-z][a-zA-Z0-9_]*\*?)`/g)].map(([, name]) => ({
      name: name!,
      labels,
    }));
  });
}

/** Every series /metrics can serve, with its labels, the cluster primary's own included. */
async function servedSeries(): Promise<Map<string, string[]>> {
  const metrics = createMetrics({ maxDetailedSeries: 10 });
  metrics.localCache(() => ({}) as LocalCacheStats);
  const served = new Map<string, string[]>();
  for (const metric of metrics.registry.getMetricsAsArray()) {
    const { name, labelNames } = metric as unknown as { name: string; labelNames?: string[] };
    served.set(name, labelNames ?? []);
  }
  const { body } = await createMetricsAggregator().exposition([]);
  for (const [, name] of body.matchAll(/^# TYPE (\S+)/gm)) served.set(name!, []);
  return served;
}

describe("operations.md's metrics table", () => {
  it('lists every series the service registers, with its labels, and no other', async () => {
    const documented = documentedSeries();
    const served = await servedSeries();
    const covers = (doc: string, name: string) =>
      doc.endsWith('*') ? name.startsWith(doc.slice(0, -1)) : doc === name;
    const undocumented = [...served.keys()].filter(
      (name) => !documented.some((row) => covers(row.name, name)),
    );
    const unserved = documented
      .map((row) => row.name)
      .filter((doc) => ![...served.keys()].some((name) => covers(doc, name)));
    const unlabelled = documented.flatMap(({ name, labels }) =>
      (served.get(name) ?? [])
        .filter((label) => !new RegExp(`\`${label}[\`=]`).test(labels))
        .map((label) => `${name}: ${label}`),
    );
    expect({ undocumented, unserved, unlabelled }).toEqual({
      undocumented: [],
      unserved: [],
      unlabelled: [],
    });
  });
});

describe("the project's address", () => {
  it('is the same in both packages, the chart, and the runbook links of the alerts', () => {
    const manifest = (path: string) =>
      JSON.parse(readFileSync(path, 'utf8')) as { repository: { url: string } };
    const home = /^git\+(https:\/\/github\.com\/[^/]+\/[^/]+)\.git$/.exec(
      manifest('package.json').repository.url,
    )?.[1];
    expect(home).toBeDefined();
    expect(manifest('packages/client/package.json').repository.url).toBe(`git+${home}.git`);
    const chart = readFileSync('deploy/helm/tollgate/Chart.yaml', 'utf8');
    expect(chart).toMatch(new RegExp(`^home: ${home}$`, 'm'));
    const runbook = `${home}/blob/main/docs/observability.md`;
    const values = readFileSync('deploy/helm/tollgate/values.yaml', 'utf8');
    expect(values).toContain(`runbookBaseUrl: ${runbook}\n`);
    const alerts = readFileSync('deploy/prometheus/tollgate-alerts.yaml', 'utf8');
    const links = [...alerts.matchAll(/runbook_url: (\S+)/g)].map((match) => match[1]);
    expect(links.length).toBeGreaterThan(5);
    expect(links.filter((link) => !link?.startsWith(`${runbook}#`))).toEqual([]);
  });
});

describe("the latency alert's threshold", () => {
  it('sits on a bound of the histogram it reads, so that p99 above it means over 1% of calls', async () => {
    const { LATENCY_BUCKETS } = await import('../../src/observability/metricsSeries.js');
    const alerts = readFileSync('deploy/prometheus/tollgate-alerts.yaml', 'utf8');
    const rule = /alert: TollgateLatencyHigh\n\s+expr: \|([^]*?)\n\s+for:/.exec(alerts)?.[1] ?? '';
    expect(rule).toContain('ratelimit_service_response_time_seconds_bucket');
    const threshold = Number(/\)\s*>\s*([\d.]+)\s*$/.exec(rule)?.[1]);
    expect(LATENCY_BUCKETS).toContain(threshold);
  });
});
