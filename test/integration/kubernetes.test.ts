import { spawn } from 'node:child_process';
import { mkdirSync, mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { parseAllDocuments } from 'yaml';
import { loadRules } from '../../src/rules/loadRules.js';
import { readSettings } from '../../src/process/settings.js';
import { publishConfigMap } from '../support/configMap.js';

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
  metadata: { name: string };
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
  ports: { name: string; containerPort: number }[];
  env: EnvVar[];
  readinessProbe: Probe;
  livenessProbe: Probe;
  lifecycle: { preStop: { exec: { command: string[] } } };
  volumeMounts: { name: string; mountPath: string }[];
}

interface PodSpec {
  terminationGracePeriodSeconds: number;
  containers: Container[];
  volumes: { name: string; configMap?: { name: string }; secret?: { secretName: string } }[];
}

async function template(values: string[]): Promise<string> {
  const rendered = await run(helm, ['template', 'tollgate', CHART, ...values]);
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

function pod(all: K8sObject[]): PodSpec {
  const deployment = only(all, 'Deployment') as K8sObject & {
    spec: { template: { spec: PodSpec } };
  };
  return deployment.spec.template.spec;
}

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
    const all = objects(await template(variants[3]!.values));
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
