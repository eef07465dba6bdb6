import { mkdtempSync, readFileSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { parse, stringify } from 'yaml';
import {
  ALERT_TESTS_PATH,
  ALERTS_PATH,
  alertNames,
  dashboardQueries,
  readDashboard,
  promtool,
  withVariablesFilled,
  type Query,
} from '../support/observability.js';

// deploy/'s alerts and dashboard, checked by promtool (Debian's prometheus package; CI installs
// it). The metric names they use are held to tollgate's /metrics in observabilityMetrics.test.ts.

/** `promtool check rules` on the queries as recording rules: it parses each one's PromQL. */
function checkQueries(queries: readonly Query[]): { status: number | null; output: string } {
  const rules = queries.map((query, i) => ({
    record: `dashboard:query_${i}`,
    expr: withVariablesFilled(query.expr),
  }));
  const path = join(mkdtempSync(join(tmpdir(), 'tollgate-dashboard-')), 'queries.yaml');
  writeFileSync(path, stringify({ groups: [{ name: 'dashboard', rules }] }));
  return promtool(['check', 'rules', path]);
}

describe('the Prometheus alerts', () => {
  it('pass promtool check rules', () => {
    const check = promtool(['check', 'rules', ALERTS_PATH]);
    expect(check.output).toContain(`SUCCESS: ${alertNames().length} rules found`);
    expect(check.status, check.output).toBe(0);
  });

  it('pass their promtool unit tests', () => {
    const run = promtool(['test', 'rules', ALERT_TESTS_PATH]);
    expect(run.status, run.output).toBe(0);
    expect(run.output).toContain('SUCCESS');
  });

  it('each have a unit test where they fire and one where they stay quiet', () => {
    type Case = { alertname: string; exp_alerts: unknown[] };
    const file = parse(readFileSync(ALERT_TESTS_PATH, 'utf8')) as {
      tests: { alert_rule_test: Case[] }[];
    };
    const cases = file.tests.flatMap((test) => test.alert_rule_test);
    for (const alert of alertNames()) {
      const mine = cases.filter((c) => c.alertname === alert);
      expect(
        mine.some((c) => c.exp_alerts.length > 0),
        `${alert} fires`,
      ).toBe(true);
      expect(
        mine.some((c) => c.exp_alerts.length === 0),
        `${alert} stays quiet`,
      ).toBe(true);
    }
  });
});

describe('the Grafana dashboard', () => {
  it('asks for a Prometheus data source and has job, instance and domain variables', () => {
    const variables = readDashboard().templating.list;
    expect(variables.find((v) => v.name === 'datasource')).toMatchObject({
      type: 'datasource',
      query: 'prometheus',
    });
    for (const name of ['job', 'instance', 'domain']) {
      expect(variables.find((v) => v.name === name)?.type, name).toBe('query');
    }
  });

  it('queries the chosen data source from every panel, each with at least one query', () => {
    const panels = readDashboard().panels.filter((panel) => panel.type !== 'row');
    expect(new Set(panels.map((panel) => panel.id)).size).toBe(panels.length);
    for (const panel of panels) {
      expect(panel.targets?.length, panel.title).toBeGreaterThan(0);
      expect(panel.datasource?.uid, panel.title).toBe('${datasource}');
      for (const target of panel.targets ?? []) {
        expect(target.datasource?.uid, panel.title).toBe('${datasource}');
      }
    }
  });

  it("has PromQL that promtool parses in every query, once Grafana's variables are filled", () => {
    const check = checkQueries(dashboardQueries());
    expect(check.status, check.output).toBe(0);
    expect(check.output).toContain(`SUCCESS: ${dashboardQueries().length} rules found`);
  });

  it('would be caught with a broken query', () => {
    const broken = checkQueries([{ where: 'a test', expr: 'sum(rate(tollgate_x_total[5m])' }]);
    expect(broken.status).not.toBe(0);
  });
});
