import { spawn } from 'node:child_process';
import { mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { parse, parseAllDocuments, stringify } from 'yaml';
import { loadRules } from '../../src/rules/loadRules.js';
import { readSettings } from '../../src/process/settings.js';
import { publishConfigMap } from '../support/configMap.js';
import { ENVOY_GATEWAY_XDS_NAMES } from '../support/envoyGateway.js';
import { ALERTS_PATH, promtool } from '../support/observability.js';

// The Helm chart in deploy/helm/tollgate, and the plain manifests rendered from it, checked
// offline: `helm lint`, `helm template` for each variant of the values, and the Go checker in
// deploy/validate, which decodes every object strictly against the Kubernetes API's Go types.
// Then what a user relies on is read from the rendered objects: the pod's environment, resolved
// from the rendered Secret as the kubelet would, must be settings tollgate reads as meant.

const CHART = 'deploy/helm/tollgate';

interface Run {
  code: number | null;
  stdout: string;
  stderr: string;
}

function run(command: string, args: string[], input?: string): Promise<Run> {
  return new Promise((resolve) => {
    const child = spawn(command, args);
    let stdout = '';
    let stderr = '';
    child.stdout.on('data', (chunk: Buffer) => (stdout += chunk.toString()));
    child.stderr.on('data', (chunk: Buffer) => (stderr += chunk.toString()));
    child.once('close', (code) => resolve({ code, stdout, stderr }));
    child.stdin.end(input);
  });
}

let helm: string;
let checker: string;
let dir: string;

beforeAll(async () => {
  dir = mkdtempSync(join(tmpdir(), 'tollgate-kubernetes-'));
  // The first run installs Helm and builds the checker with Go (a few minutes, most of it
  // fetching and compiling Kubernetes' modules); later runs reuse both from .cache/.
  const helmBuild = await run(process.execPath, ['scripts/helm.mjs', '--print-binary']);
  expect(helmBuild, helmBuild.stderr).toMatchObject({ code: 0 });
  helm = helmBuild.stdout.trim();
  const checkerBuild = await run(process.execPath, [
    'scripts/validate-kubernetes.mjs',
    '--print-binary',
  ]);
  expect(checkerBuild, checkerBuild.stderr).toMatchObject({ code: 0 });
  checker = checkerBuild.stdout.trim();
}, 900_000);

afterAll(() => rmSync(dir, { recursive: true, force: true }));

/** A rendered object: only what these tests read is typed. */
interface K8sObject {
  kind: string;
  metadata: { name: string; labels?: Record<string, string>; annotations?: Record<string, string> };
  [field: string]: unknown;
}

interface EnvVar {
  name: string;
  value?: string;
  valueFrom?: { secretKeyRef?: { name: string; key: string; optional?: boolean } };
}

interface Probe {
  grpc?: { port: number };
  httpGet?: { path: string; port: string };
}

interface Container {
  image: string;
  ports: { name: string; containerPort: number }[];
  env: EnvVar[];
  readinessProbe: Probe;
  livenessProbe: Probe;
  lifecycle: { preStop: { exec: { command: string[] } } };
  volumeMounts: { name: string; mountPath: string }[];
}

interface PodTemplate {
  metadata: { labels: Record<string, string>; annotations?: Record<string, string> };
  spec: PodSpec;
}

interface PodSpec {
  terminationGracePeriodSeconds: number;
  containers: Container[];
  volumes: { name: string; configMap?: { name: string }; secret?: { secretName: string } }[];
}

async function template(values: string[], release = 'tollgate'): Promise<string> {
  const rendered = await run(helm, ['template', release, CHART, ...values]);
  expect(rendered, rendered.stderr).toMatchObject({ code: 0 });
  return rendered.stdout;
}

function objects(yaml: string): K8sObject[] {
  return parseAllDocuments(yaml)
    .map((doc) => doc.toJS() as K8sObject | null)
    .filter((object): object is K8sObject => object !== null);
}

function only(all: K8sObject[], kind: string): K8sObject {
  const found = all.filter((object) => object.kind === kind);
  expect(found, kind).toHaveLength(1);
  return found[0]!;
}

function podTemplate(all: K8sObject[]): PodTemplate {
  const deployment = only(all, 'Deployment') as K8sObject & { spec: { template: PodTemplate } };
  return deployment.spec.template;
}

const pod = (all: K8sObject[]): PodSpec => podTemplate(all).spec;

/**
 * The container's environment as the kubelet gives it: values as they are, secretKeyRefs read
 * from `secrets` (the rendered Secret, or one a user made), optional ones left out when absent.
 */
function environment(
  container: Container,
  secrets: Record<string, Record<string, string>>,
): Record<string, string> {
  const env: Record<string, string> = {};
  for (const variable of container.env) {
    const ref = variable.valueFrom?.secretKeyRef;
    const value = ref ? secrets[ref.name]?.[ref.key] : variable.value;
    if (value === undefined) {
      expect(ref?.optional, `${variable.name} reads a missing value`).toBe(true);
      continue;
    }
    env[variable.name] = value;
  }
  return env;
}

function renderedSecrets(all: K8sObject[]): Record<string, Record<string, string>> {
  const secrets: Record<string, Record<string, string>> = {};
  for (const secret of all.filter((object) => object.kind === 'Secret')) {
    secrets[secret.metadata.name] = secret.stringData as Record<string, string>;
  }
  return secrets;
}

const variants = [
  { name: 'the default values', values: [] as string[], kinds: 6 },
  {
    name: 'an HPA and a ServiceMonitor',
    values: ['--set', 'autoscaling.enabled=true', '--set', 'serviceMonitor.enabled=true'],
    kinds: 8,
  },
  {
    name: 'gRPC TLS with client certificates',
    values: [
      '--set',
      'grpcTls.enabled=true,grpcTls.secretName=tollgate-tls,grpcTls.requireClientCert=true',
      '--set',
      'grpcTls.clientSan=envoy.example.com',
    ],
    kinds: 6,
  },
  {
    name: 'a NetworkPolicy, a ServiceMonitor and a PrometheusRule',
    values: [
      '--set',
      'networkPolicy.enabled=true,serviceMonitor.enabled=true,prometheusRule.enabled=true',
      '--set-json',
      'networkPolicy.grpcFrom=[{"namespaceSelector":{"matchLabels":{"kubernetes.io/metadata.name":"envoy-gateway-system"}}}]',
    ],
    kinds: 9,
  },
  {
    name: 'the rules over xDS, without a ConfigMap',
    values: ['--set', 'xds.enabled=true,xds.serverUrl=envoy-gateway.envoy-gateway-system:18001'],
    kinds: 5,
  },
  {
    name: "a parent chart's global values",
    values: ['--set', 'global.imageRegistry=registry.example.com'],
    kinds: 6,
  },
  {
    name: 'an existing Redis Secret and rules ConfigMap',
    values: [
      '--set',
      'redis.existingSecret=shared-redis,redis.existingSecretKeys.url=url,redis.existingSecretKeys.auth=password',
      '--set',
      'rules.existingConfigMap=shared-rules',
    ],
    kinds: 4,
  },
];

describe('the Helm chart', () => {
  it.each(variants)('passes helm lint and the checker with $name', async ({ values, kinds }) => {
    const lint = await run(helm, ['lint', '--strict', CHART, ...values]);
    expect(lint.stdout, lint.stderr).toContain('1 chart(s) linted, 0 chart(s) failed');

    const checked = await run(checker, ['-'], await template(values));
    expect(checked).toEqual({ code: 0, stdout: `OK: - (${kinds} objects)\n`, stderr: '' });
  });

  it('probes readiness on gRPC health, on the gRPC port', async () => {
    const [container] = pod(objects(await template([]))).containers;
    const grpcPort = container!.ports.find((port) => port.name === 'grpc')!.containerPort;
    expect(container!.readinessProbe).toMatchObject({ grpc: { port: grpcPort } });
    expect(container!.readinessProbe.httpGet).toBeUndefined();
    // Liveness never asks about the store, so a Redis outage restarts no pod.
    expect(container!.livenessProbe).toMatchObject({ httpGet: { path: '/metrics', port: 'http' } });
  });

  it('gives the pod no service links, which would set STATSD_PORT or GRPC_PORT to tcp://...', async () => {
    expect(pod(objects(await template([])))).toMatchObject({ enableServiceLinks: false });
  });

  it('probes readiness on HTTP /healthcheck when gRPC speaks TLS, which the gRPC probe cannot', async () => {
    const all = objects(await template(variants[2]!.values));
    const spec = pod(all);
    const [container] = spec.containers;
    expect(container!.readinessProbe).toMatchObject({
      httpGet: { path: '/healthcheck', port: 'http' },
    });
    expect(container!.readinessProbe.grpc).toBeUndefined();

    const settings = readSettings(environment(container!, renderedSecrets(all)));
    const mount = container!.volumeMounts.find((m) => m.name === 'grpc-tls')!.mountPath;
    expect(settings.grpcServer.tls).toEqual({
      certPath: `${mount}/tls.crt`,
      keyPath: `${mount}/tls.key`,
      clientCaPath: `${mount}/ca.crt`,
      clientSan: 'envoy.example.com',
    });
    expect(spec.volumes).toContainEqual({
      name: 'grpc-tls',
      secret: { secretName: 'tollgate-tls' },
    });
  });

  it("gives tollgate the Redis settings of the chart's Secret, by their names", async () => {
    const all = objects(await template(['--set', 'redis.auth=limiter:s3cret']));
    expect(Object.keys(only(all, 'Secret').stringData as object).sort()).toEqual([
      'REDIS_AUTH',
      'REDIS_URL',
    ]);
    const settings = readSettings(environment(pod(all).containers[0]!, renderedSecrets(all)));
    expect(settings.redis).toMatchObject({
      host: 'redis',
      port: 6379,
      username: 'limiter',
      password: 's3cret',
    });
  });

  it('reads REDIS_URL and REDIS_AUTH from the keys named for an existing Secret', async () => {
    const all = objects(
      await template(variants.find((v) => v.name.startsWith('an existing Redis'))!.values),
    );
    expect(all.filter((object) => object.kind === 'Secret')).toEqual([]);
    const secrets = { 'shared-redis': { url: 'redis://redis.shared:6380/2', password: 'pw' } };
    const settings = readSettings(environment(pod(all).containers[0]!, secrets));
    expect(settings.redis).toMatchObject({
      host: 'redis.shared',
      port: 6380,
      db: 2,
      password: 'pw',
    });
    // Without the optional password key the pod still starts.
    const noPassword = { 'shared-redis': { url: 'redis://redis.shared:6380' } };
    expect(readSettings(environment(pod(all).containers[0]!, noPassword)).redis?.password).toBe(
      undefined,
    );
  });

  it("mounts the rules' ConfigMap where CONFIG_PATH points, and its rules load", async () => {
    const all = objects(await template([]));
    const spec = pod(all);
    const [container] = spec.containers;
    const settings = readSettings(environment(container!, renderedSecrets(all)));
    const configMap = only(all, 'ConfigMap');
    const volume = spec.volumes.find((v) => v.configMap?.name === configMap.metadata.name)!;
    const mount = container!.volumeMounts.find((m) => m.name === volume.name)!;
    expect(settings.configPath).toBe(mount.mountPath);

    // The kubelet's layout of that ConfigMap, read as tollgate reads it.
    const mounted = join(dir, 'rules');
    mkdirSync(mounted);
    publishConfigMap(mounted, configMap.data as Record<string, string>);
    const rules = loadRules(mounted, { defaultAlgorithm: 'sliding_window' });
    expect([...rules.domains.keys()]).toEqual(['example']);
  });

  it("gives the pod time for the preStop sleep and tollgate's whole drain", async () => {
    const all = objects(await template(['--set', 'shutdown.graceSeconds=25']));
    const spec = pod(all);
    const [container] = spec.containers;
    const settings = readSettings(environment(container!, renderedSecrets(all)));
    const preStopSeconds = Number(container!.lifecycle.preStop.exec.command[1]);
    expect(settings.shutdownGraceMs).toBe(25_000);
    expect(spec.terminationGracePeriodSeconds).toBe(preStopSeconds + 25 + 5);
  });

  it.each([
    {
      fault: 'a misspelt value, which Helm alone would ignore',
      values: ['--set', 'redis.ur=redis://elsewhere:6379'],
      message: "at '/redis': additional properties 'ur' not allowed",
    },
    {
      fault: 'a setting in env that the chart sets from its values',
      values: ['--set', 'env.REDIS_URL=redis://elsewhere:6379'],
      message: 'env.REDIS_URL: the chart sets REDIS_URL from its values',
    },
  ])('refuses $fault', async ({ values, message }) => {
    const rendered = await run(helm, ['template', 'tollgate', CHART, ...values]);
    expect(rendered.code).toBe(1);
    expect(rendered.stderr).toContain(message);
  });
});

describe('the metrics port', () => {
  it('serves Prometheus on a port of its own, named metrics, which the ServiceMonitor scrapes', async () => {
    const all = objects(
      await template(['--set', 'metrics.port=19001,serviceMonitor.enabled=true']),
    );
    const [container] = pod(all).containers;
    expect(container!.ports).toContainEqual({
      name: 'metrics',
      containerPort: 19001,
      protocol: 'TCP',
    });
    const env = environment(container!, renderedSecrets(all));
    expect(env).toMatchObject({ PROMETHEUS_ADDR: ':19001', PROMETHEUS_PATH: '/metrics' });
    // What the service makes of them: a listener of its own on every interface.
    expect(readSettings(env).prometheus).toEqual({
      host: undefined,
      port: 19001,
      path: '/metrics',
    });
    const service = only(all, 'Service') as K8sObject & {
      spec: { ports: { name: string; port: number; targetPort: string }[] };
    };
    expect(service.spec.ports).toContainEqual(
      expect.objectContaining({ name: 'metrics', port: 19001, targetPort: 'metrics' }),
    );
    const monitor = only(all, 'ServiceMonitor') as K8sObject & {
      spec: { endpoints: { port: string; path: string }[]; jobLabel?: string };
    };
    expect(monitor.spec.endpoints).toEqual([{ port: 'metrics', path: '/metrics' }]);
  });
});

interface Peer {
  namespaceSelector?: { matchLabels: Record<string, string> };
  podSelector?: { matchLabels: Record<string, string> };
}

interface IngressRule {
  ports: { port: string; protocol: string }[];
  from: Peer[];
}

describe('the NetworkPolicy', () => {
  const envoy: Peer = {
    namespaceSelector: { matchLabels: { 'kubernetes.io/metadata.name': 'envoy-gateway-system' } },
    podSelector: { matchLabels: { 'app.kubernetes.io/component': 'proxy' } },
  };
  const enabled = [
    '--set',
    'networkPolicy.enabled=true',
    '--set-json',
    `networkPolicy.grpcFrom=${JSON.stringify([envoy])}`,
  ];

  /** The peers that may reach each named port of the pods, as the policy's rules say. */
  async function admitted(values: string[]): Promise<Record<string, Peer[]>> {
    const all = objects(await template([...enabled, ...values]));
    const policy = only(all, 'NetworkPolicy') as K8sObject & {
      spec: { podSelector: { matchLabels: Record<string, string> }; ingress: IngressRule[] };
    };
    expect(podTemplate(all).metadata.labels).toMatchObject(policy.spec.podSelector.matchLabels);
    const peers: Record<string, Peer[]> = {};
    for (const rule of policy.spec.ingress) {
      for (const { port } of rule.ports) (peers[port] ??= []).push(...rule.from);
    }
    return peers;
  }

  it('admits the named peers to gRPC, the monitoring namespace to metrics, nobody to HTTP', async () => {
    expect(await admitted([])).toEqual({
      grpc: [envoy],
      metrics: [
        { namespaceSelector: { matchLabels: { 'kubernetes.io/metadata.name': 'monitoring' } } },
      ],
    });
  });

  it('opens the HTTP port to the peers that values name, and only then', async () => {
    const operators: Peer = { podSelector: { matchLabels: { role: 'ratelimit-admin' } } };
    const peers = await admitted([
      '--set-json',
      `networkPolicy.httpFrom=${JSON.stringify([operators])}`,
    ]);
    expect(peers.http).toEqual([operators]);
    expect(peers.grpc).toEqual([envoy]);
  });

  it('is not rendered unless enabled, and refuses to admit nobody to gRPC', async () => {
    expect(objects(await template([])).filter((o) => o.kind === 'NetworkPolicy')).toEqual([]);
    const rendered = await run(helm, [
      'template',
      'tollgate',
      CHART,
      '--set',
      'networkPolicy.enabled=true',
    ]);
    expect(rendered.code).toBe(1);
    expect(rendered.stderr).toContain('networkPolicy.grpcFrom needs at least one peer');
  });
});

describe('the rules over xDS', () => {
  const xds = [
    '--set',
    'xds.enabled=true,xds.serverUrl=envoy-gateway.envoy-gateway-system:18001,xds.nodeId=envoy-ratelimit',
  ];

  it('gives tollgate the xDS settings, and makes and mounts no rules ConfigMap', async () => {
    // Without rules files at all: xDS mode needs none.
    const all = objects(await template([...xds, '--set', 'rules.files=null']));
    expect(all.filter((object) => object.kind === 'ConfigMap')).toEqual([]);
    const spec = pod(all);
    expect(spec.volumes.map((volume) => volume.name)).not.toContain('rules');
    expect(spec.containers[0]!.volumeMounts.map((mount) => mount.name)).not.toContain('rules');
    const env = environment(spec.containers[0]!, renderedSecrets(all));
    expect(env.CONFIG_PATH).toBeUndefined();
    const settings = readSettings(env);
    expect(settings.xds).toMatchObject({
      serverUrl: 'envoy-gateway.envoy-gateway-system:18001',
      nodeId: 'envoy-ratelimit',
    });
  });

  // docs/kubernetes.md's values for Envoy Gateway's xDS server, which requires mutual TLS: the
  // Secret the page makes (tls.crt, tls.key and ca.crt, copied from envoy-rate-limit) must be
  // mounted where the TLS settings point.
  it("mounts docs/kubernetes.md's copy of Envoy Gateway's certificate where the xDS TLS settings point", async () => {
    const page = readFileSync('docs/kubernetes.md', 'utf8');
    const section = page.slice(page.indexOf('## Rules over xDS'), page.indexOf('## Redis from a'));
    const [, values] = /^```yaml\n([^]*?)^```/m.exec(section) ?? [];
    expect(values, 'the section has its values').toBeDefined();
    const secretName = /create secret generic (\S+)/.exec(section)?.[1];
    const keys = [...section.matchAll(/--from-file=(\S+)/g)].map(([, key]) => key);
    expect(keys.sort()).toEqual(['ca.crt', 'tls.crt', 'tls.key']);
    const file = join(dir, 'xds-values.yaml');
    writeFileSync(file, values!);
    const all = objects(await template(['-f', file]));
    const spec = pod(all);
    const settings = readSettings(environment(spec.containers[0]!, renderedSecrets(all)));
    expect(settings.xds).toMatchObject({ nodeId: 'envoy-ratelimit' });
    const tls = settings.xds?.tls;
    expect(tls).toBeDefined();
    const volume = spec.volumes.find((v) => v.secret?.secretName === secretName);
    expect(volume, `a volume of the Secret ${secretName}`).toBeDefined();
    const mount = spec.containers[0]!.volumeMounts.find((m) => m.name === volume!.name);
    expect(mount).toBeDefined();
    expect([tls!.certPath, tls!.keyPath, tls!.caPath]).toEqual(
      ['tls.crt', 'tls.key', 'ca.crt'].map((key) => `${mount!.mountPath}/${key}`),
    );
    // tollgate checks the controller's certificate for the URL's host: one of the names in it.
    const [host, port] = settings.xds!.serverUrl.split(':');
    expect(ENVOY_GATEWAY_XDS_NAMES).toContain(host);
    expect(port).toBe('18001');
  });

  it('refuses xDS without a management server', async () => {
    const rendered = await run(helm, ['template', 'tollgate', CHART, '--set', 'xds.enabled=true']);
    expect(rendered.code).toBe(1);
    expect(rendered.stderr).toContain('xds.enabled needs xds.serverUrl');
  });
});

describe('the image', () => {
  it("is the release's, by tag, or exactly one image when a digest is given", async () => {
    const image = async (values: string[]) =>
      pod(objects(await template(values))).containers[0]!.image;
    const chart = parse(readFileSync(join(CHART, 'Chart.yaml'), 'utf8')) as { appVersion: string };
    expect(await image([])).toBe(`ghcr.io/tollgate/tollgate:${chart.appVersion}`);
    const digest = `sha256:${'ab12'.repeat(16)}`;
    expect(await image(['--set', `image.digest=${digest}`])).toBe(
      `ghcr.io/tollgate/tollgate@${digest}`,
    );
    const bad = await run(helm, ['template', 'tollgate', CHART, '--set', 'image.digest=latest']);
    expect(bad.code).not.toBe(0);
    expect(bad.stderr).toContain("at '/image/digest': 'latest' does not match pattern");
  });
});

describe("a parent chart's global values", () => {
  it('are accepted beside the chart’s own, which stay checked', async () => {
    const file = join(dir, 'umbrella-values.yaml');
    writeFileSync(
      file,
      stringify({ global: { imageRegistry: 'registry.example.com', storageClass: 'fast' } }),
    );
    const lint = await run(helm, ['lint', '--strict', CHART, '-f', file]);
    expect(lint.stdout, lint.stderr).toContain('1 chart(s) linted, 0 chart(s) failed');
    expect(only(objects(await template(['-f', file])), 'Deployment').metadata.name).toBe(
      'tollgate',
    );
    const misspelt = await run(helm, [
      'template',
      'tollgate',
      CHART,
      '-f',
      file,
      '--set',
      'metrics.prot=1',
    ]);
    expect(misspelt.stderr).toContain("additional properties 'prot' not allowed");
  });
});

describe('rolling the pods on a change of the Redis Secret', () => {
  it('puts no hash of the Secret, nor anything drawn from it, on the pods', async () => {
    const one = objects(await template(['--set', 'redis.auth=limiter:first-password']));
    const two = objects(await template(['--set', 'redis.auth=limiter:second-password']));
    expect(only(one, 'Secret').stringData).not.toEqual(only(two, 'Secret').stringData);
    expect(podTemplate(one)).toEqual(podTemplate(two));
    expect(only(one, 'Deployment')).toEqual(only(two, 'Deployment'));
    const annotations = Object.values(podTemplate(one).metadata.annotations ?? {});
    expect(annotations.filter((value) => /^[0-9a-f]{64}$/.test(value))).toEqual([]);
  });

  it('rolls them when redis.revision changes', async () => {
    const before = podTemplate(objects(await template(['--set', 'redis.revision=1'])));
    const after = podTemplate(objects(await template(['--set', 'redis.revision=2'])));
    expect(after).not.toEqual(before);
    expect(after.metadata.annotations).toEqual({ 'tollgate/redis-secret-revision': '2' });
  });

  it('asks Stakater Reloader to roll them, naming the Secret they read', async () => {
    for (const values of [
      [],
      variants.find((v) => v.name.startsWith('an existing Redis'))!.values,
    ]) {
      const all = objects(await template([...values, '--set', 'redis.reloader=true']));
      const secret = pod(all).containers[0]!.env.find((e) => e.name === 'REDIS_URL')!.valueFrom!
        .secretKeyRef!.name;
      expect(only(all, 'Deployment').metadata.annotations).toEqual({
        'secret.reloader.stakater.com/reload': secret,
      });
    }
  });
});

interface AlertRule {
  alert: string;
  expr: string;
  for: string;
  labels: Record<string, string>;
  annotations: Record<string, string>;
}

/** The chart's default runbookBaseUrl. */
const RUNBOOK = (
  parse(readFileSync(`${CHART}/values.yaml`, 'utf8')) as {
    prometheusRule: { runbookBaseUrl: string };
  }
).prometheusRule.runbookBaseUrl;

const rawAlerts = (): AlertRule[] =>
  (parse(readFileSync(ALERTS_PATH, 'utf8')) as { groups: { rules: AlertRule[] }[] }).groups.flatMap(
    (group) => group.rules,
  );

describe('the PrometheusRule', () => {
  async function rendered(release: string, values: string[] = []) {
    const all = objects(
      await template(
        ['--set', 'serviceMonitor.enabled=true,prometheusRule.enabled=true', ...values],
        release,
      ),
    );
    const rule = only(all, 'PrometheusRule') as K8sObject & {
      spec: { groups: { name: string; rules: AlertRule[] }[] };
    };
    return { all, groups: rule.spec.groups, rules: rule.spec.groups.flatMap((g) => g.rules) };
  }

  /**
   * The job Prometheus gives the ServiceMonitor's targets: without a jobLabel the operator names
   * it after the Service the monitor selects.
   */
  function scrapeJob(all: K8sObject[]): string {
    const monitor = only(all, 'ServiceMonitor') as K8sObject & {
      spec: { jobLabel?: string; selector: { matchLabels: Record<string, string> } };
    };
    expect(monitor.spec.jobLabel).toBeUndefined();
    const selected = all.filter(
      (object) =>
        object.kind === 'Service' &&
        Object.entries(monitor.spec.selector.matchLabels).every(
          ([key, value]) => object.metadata.labels?.[key] === value,
        ),
    );
    expect(selected).toHaveLength(1);
    return selected[0]!.metadata.name;
  }

  it.each(['tollgate', 'edge'])(
    "selects the job of the ServiceMonitor's targets, as release %s",
    async (release) => {
      const { all, rules } = await rendered(release);
      const job = scrapeJob(all);
      expect(rules.find((r) => r.alert === 'TollgateDown')!.expr).toBe(`up{job="${job}"} == 0`);
      for (const rule of rules) {
        // Every selector of every alert is this release's: one matcher per metric it reads.
        const selectors = rule.expr.match(/[a-z_]+\{[^}]*\}/g) ?? [];
        expect(selectors.length, rule.alert).toBeGreaterThan(0);
        for (const selector of selectors) expect(selector, rule.alert).toContain(`job="${job}"`);
      }
    },
  );

  it('has the alerts of deploy/prometheus, with the job matcher its only difference', async () => {
    const { all, rules } = await rendered('edge');
    const job = scrapeJob(all);
    const mine = (expr: string) =>
      expr.replaceAll(`{job="${job}"}`, '').replaceAll(`job="${job}", `, '');
    const raw = (expr: string) => expr.replaceAll('{job=~".*tollgate.*"}', '');
    expect(rules.map((r) => ({ ...r, expr: mine(r.expr) }))).toEqual(
      rawAlerts().map((r) => ({ ...r, expr: raw(r.expr) })),
    );
  });

  it('passes promtool, and its TollgateDown fires for its own release only', async () => {
    const { groups } = await rendered('edge');
    const rulesFile = join(dir, 'edge-alerts.yaml');
    writeFileSync(rulesFile, stringify({ groups }));
    const check = promtool(['check', 'rules', rulesFile]);
    expect(check.status, check.output).toBe(0);

    const testFile = join(dir, 'edge-alerts.test.yaml');
    const down = (job: string, instance: string) => ({
      series: `up{job="${job}", instance="${instance}"}`,
      values: '0x10',
    });
    writeFileSync(
      testFile,
      stringify({
        rule_files: [rulesFile],
        evaluation_interval: '1m',
        tests: [
          {
            interval: '1m',
            input_series: [
              down('edge-tollgate', '10.0.0.1:9090'),
              down('tollgate', '10.0.0.2:9090'),
            ],
            alert_rule_test: [
              {
                eval_time: '5m',
                alertname: 'TollgateDown',
                exp_alerts: [
                  {
                    exp_labels: {
                      severity: 'critical',
                      job: 'edge-tollgate',
                      instance: '10.0.0.1:9090',
                    },
                    exp_annotations: {
                      runbook_url: `${RUNBOOK}#tollgatedown`,
                      summary: 'tollgate 10.0.0.1:9090 is down',
                      description:
                        "Prometheus could not scrape 10.0.0.1:9090 for 2 minutes. Envoy's calls to it fail, and its failure_mode_deny decides them.",
                    },
                  },
                ],
              },
            ],
          },
        ],
      }),
    );
    const unit = promtool(['test', 'rules', testFile]);
    expect(unit.output).toContain('SUCCESS');
    expect(unit.status, unit.output).toBe(0);
  });

  it('links each alert to its runbook section, at runbookBaseUrl', async () => {
    const headings = new Set(
      [...readFileSync('docs/observability.md', 'utf8').matchAll(/^#+ (.+)$/gm)].map((m) =>
        m[1]!
          .toLowerCase()
          .replace(/[^a-z0-9 -]/g, '')
          .replace(/ /g, '-'),
      ),
    );
    const { rules } = await rendered('tollgate', [
      '--set',
      'prometheusRule.runbookBaseUrl=https://wiki.example.com/tollgate/',
    ]);
    for (const rule of rules) {
      const anchor = rule.alert.toLowerCase();
      expect(headings.has(anchor), `docs/observability.md has a section ${rule.alert}`).toBe(true);
      expect(rule.annotations.runbook_url).toBe(`https://wiki.example.com/tollgate#${anchor}`);
    }
    // The raw file's links are the chart's default ones.
    for (const rule of rawAlerts()) {
      expect(rule.annotations.runbook_url).toBe(`${RUNBOOK}#${rule.alert.toLowerCase()}`);
    }
  });
});

describe('the checker', () => {
  it.each([
    {
      fault: 'a misspelt field',
      edit: (yaml: string) => yaml.replace('readOnlyRootFilesystem:', 'readOnlyRootFilesytem:'),
      message:
        'document 7 (Deployment tollgate): unknown field "spec.template.spec.containers[0].securityContext.readOnlyRootFilesytem"',
    },
    {
      fault: 'a field in the wrong case',
      edit: (yaml: string) => yaml.replace('  replicas: 3', '  Replicas: 3'),
      message: 'document 7 (Deployment tollgate): unknown field "spec.Replicas"',
    },
    {
      fault: 'a kind it does not know',
      edit: (yaml: string) =>
        yaml.replace('kind: PodDisruptionBudget', 'kind: PodDisruptionBudjet'),
      message: 'document 2 (PodDisruptionBudjet tollgate): unknown kind "PodDisruptionBudjet"',
    },
    {
      fault: "a Service port that is no container's",
      edit: (yaml: string) => yaml.replace('targetPort: grpc', 'targetPort: grcp'),
      message: `port grpc: targetPort "grcp" is no container's named port`,
    },
    {
      fault: 'a container without a liveness probe',
      edit: (yaml: string) => yaml.replace('livenessProbe:', 'startupProbe:'),
      message: 'container tollgate: needs a readinessProbe and a livenessProbe',
    },
  ])('refuses the plain manifests with $fault', async ({ edit, message }) => {
    const yaml = readFileSync('deploy/kubernetes/tollgate.yaml', 'utf8');
    const broken = edit(yaml);
    expect(broken, 'the edit no longer finds its text').not.toBe(yaml);
    const checked = await run(checker, ['-'], broken);
    expect(checked.code).toBe(1);
    expect(checked.stdout).toContain(message);
  });
});

describe('the checker, on a NetworkPolicy', () => {
  it.each([
    {
      fault: "a port that is no container's",
      edit: (yaml: string) => yaml.replace('- port: metrics', '- port: metric'),
      message: `ingress port "metric" is no container's named port`,
    },
    {
      fault: 'a rule that admits every source',
      edit: (yaml: string) => yaml.replace(/\n {6}from:\n(?: {8}.*\n)+?(?= {4}- ports:)/, '\n'),
      message: 'an ingress rule without from admits every source',
    },
  ])('refuses $fault', async ({ edit, message }) => {
    const yaml = await template(variants.find((v) => v.name.startsWith('a NetworkPolicy'))!.values);
    const broken = edit(yaml);
    expect(broken, 'the edit no longer finds its text').not.toBe(yaml);
    const checked = await run(checker, ['-'], broken);
    expect(checked.code).toBe(1);
    expect(checked.stdout).toContain(message);
  });
});

describe('the plain manifests in deploy/kubernetes', () => {
  it('are what the chart renders with its default values', async () => {
    const check = await run(process.execPath, ['scripts/render-kubernetes.mjs', '--check']);
    expect(check, check.stderr).toMatchObject({ code: 0 });
  });

  it('pass the checker', async () => {
    const checked = await run(checker, ['deploy/kubernetes/tollgate.yaml']);
    expect(checked).toEqual({
      code: 0,
      stdout: 'OK: deploy/kubernetes/tollgate.yaml (6 objects)\n',
      stderr: '',
    });
  });

  it('are all that kustomization.yaml applies', () => {
    const kustomization = readFileSync('deploy/kubernetes/kustomization.yaml', 'utf8');
    expect(parseAllDocuments(kustomization)[0]!.toJS()).toMatchObject({
      resources: ['tollgate.yaml'],
    });
  });
});
