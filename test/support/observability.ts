import { spawnSync } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { parse } from 'yaml';
import { notInstalled } from './prometheus.js';

/**
 * The observability assets in deploy/ as data, and the metric names their PromQL uses, so that
 * tests can hold the dashboard and the alerts to what tollgate really exposes.
 */
export const DASHBOARD_PATH = 'deploy/grafana/tollgate-dashboard.json';
export const ALERTS_PATH = 'deploy/prometheus/tollgate-alerts.yaml';
export const ALERT_TESTS_PATH = 'deploy/prometheus/tollgate-alerts.test.yaml';

/** A PromQL expression and where it was found, for failure messages. */
export interface Query {
  where: string;
  expr: string;
}

interface Target {
  expr?: string;
}
interface Panel {
  id: number;
  type: string;
  title: string;
  datasource?: { type?: string; uid?: string };
  targets?: (Target & { datasource?: { uid?: string } })[];
}
interface Variable {
  name: string;
  type: string;
  query?: string | { query?: string };
}
export interface Dashboard {
  panels: Panel[];
  templating: { list: Variable[] };
}

export function readDashboard(): Dashboard {
  return JSON.parse(readFileSync(DASHBOARD_PATH, 'utf8')) as Dashboard;
}

/** Every panel's targets, and the series that the query variables read their values from. */
export function dashboardQueries(dashboard = readDashboard()): Query[] {
  const queries: Query[] = [];
  for (const panel of dashboard.panels) {
    for (const target of panel.targets ?? []) {
      queries.push({ where: `panel "${panel.title}"`, expr: target.expr ?? '' });
    }
  }
  for (const variable of dashboard.templating.list) {
    if (variable.type !== 'query') continue;
    const query = typeof variable.query === 'string' ? variable.query : variable.query?.query;
    const selector = /^label_values\((.+),\s*\w+\)$/.exec(query ?? '')?.[1];
    queries.push({ where: `variable $${variable.name}`, expr: selector ?? '' });
  }
  return queries;
}

export function alertQueries(): Query[] {
  const file = parse(readFileSync(ALERTS_PATH, 'utf8')) as {
    groups: { rules: { alert: string; expr: string }[] }[];
  };
  return file.groups.flatMap((group) =>
    group.rules.map((rule) => ({ where: `alert ${rule.alert}`, expr: rule.expr })),
  );
}

export const alertNames = (): string[] =>
  alertQueries().map(({ where }) => where.replace(/^alert /, ''));

/** The dashboard's queries and the alerts'. */
export const everyQuery = (): Query[] => [...dashboardQueries(), ...alertQueries()];

/** Grafana's variables as Prometheus would see them: ranges of 5m, and `.*` for every choice. */
export function withVariablesFilled(expr: string): string {
  return expr.replace(/\$__(rate_interval|interval|range)\b/g, '5m').replace(/\$\{?\w+\}?/g, '.*');
}

const KEYWORDS = new Set(['and', 'or', 'unless', 'bool', 'offset', 'group_left', 'group_right']);

/**
 * The metric names an expression selects: identifiers that are not functions, aggregations,
 * keywords, label names, numbers or durations. A histogram's `_bucket` keeps its suffix here;
 * `missingNames` knows which suffixes a type has.
 */
export function metricNames(expr: string): string[] {
  const bare = expr
    .replace(/"(?:[^"\\]|\\.)*"|'(?:[^'\\]|\\.)*'|`[^`]*`/g, '""')
    .replace(/\{[^}]*\}/g, ' ')
    .replace(/\[[^\]]*\]/g, ' ')
    .replace(/\b(?:by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)/g, ' ');
  const names = new Set<string>();
  for (const [, number, name, call] of bare.matchAll(/(\d[\w.+]*)|([A-Za-z_:][\w:]*)(\s*\()?/g)) {
    if (number !== undefined || call !== undefined || name === undefined) continue;
    if (!KEYWORDS.has(name.toLowerCase())) names.add(name);
  }
  return [...names].sort();
}

/** A label that an expression groups or matches by; `value` when it must equal one. */
export interface LabelUse {
  label: string;
  value?: string;
}

/** The labels an expression groups by (by, without, on, ignoring, group_*) or matches on. */
export function labelUses(expr: string): LabelUse[] {
  const uses: LabelUse[] = [];
  for (const [, labels] of expr.matchAll(
    /\b(?:by|without|on|ignoring|group_left|group_right)\s*\(([^)]*)\)/g,
  )) {
    for (const label of labels!.split(',').map((l) => l.trim())) if (label) uses.push({ label });
  }
  for (const [, label, op, value] of expr.matchAll(/(\w+)\s*(=~|!~|!=|=)\s*"((?:[^"\\]|\\.)*)"/g)) {
    uses.push(op === '=' ? { label: label!, value: value! } : { label: label! });
  }
  return uses;
}

/** Labels that Prometheus gives every scraped series, whatever tollgate exposes. */
const TARGET_LABELS = new Set(['job', 'instance']);

/**
 * The label uses of an expression that no sample of its metrics in `exposition` has: a label
 * tollgate never sets, or a value it never gives.
 */
export function missingLabels(expr: string, exposition: string): LabelUse[] {
  const names = metricNames(expr).join('|');
  const samples = exposition
    .split('\n')
    .filter((line) => new RegExp(`^(?:${names})\\{`).test(line));
  return labelUses(expr).filter(
    ({ label, value }) =>
      !TARGET_LABELS.has(label) &&
      !samples.some((line) => {
        const pair = value === undefined ? `${label}="` : `${label}="${value}"`;
        return line.includes(`{${pair}`) || line.includes(`,${pair}`);
      }),
  );
}

/** Series that Prometheus makes itself rather than scrapes. */
const PROMETHEUS_SERIES = new Set(['up']);

const SUFFIXES: Record<string, readonly string[]> = {
  histogram: ['_bucket', '_sum', '_count'],
  summary: ['_sum', '_count'],
};

/** The names that a text exposition (`GET /metrics`) does not declare with `# TYPE`. */
export function missingNames(names: readonly string[], exposition: string): string[] {
  const types = new Map<string, string>();
  for (const [, name, type] of exposition.matchAll(/^# TYPE (\S+) (\S+)$/gm)) {
    types.set(name!, type!);
  }
  const declared = (name: string): boolean =>
    types.has(name) ||
    Object.entries(SUFFIXES).some(([type, suffixes]) =>
      suffixes.some(
        (suffix) => name.endsWith(suffix) && types.get(name.slice(0, -suffix.length)) === type,
      ),
    );
  return names.filter((name) => !PROMETHEUS_SERIES.has(name) && !declared(name));
}

/** Runs promtool, which Debian's `prometheus` package installs; without it, fails and says so. */
export function promtool(args: string[]): { status: number | null; output: string } {
  const run = spawnSync('promtool', args, { encoding: 'utf8', timeout: 60_000 });
  if ((run.error as NodeJS.ErrnoException | undefined)?.code === 'ENOENT') {
    throw notInstalled('promtool');
  }
  if (run.error) throw run.error;
  return { status: run.status, output: `${run.stdout}${run.stderr}` };
}
