import { spawnSync } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { describe, expect, it } from 'vitest';
import { parse } from 'yaml';

// The Docker stack cannot run on these machines (no engine), so its files are checked here for
// what would break it: services that point at each other by the wrong name or port, a mount of a
// file that does not exist, an unpinned image, a container running as root. Where the compose
// plugin exists, `docker compose config` checks the file against the compose schema too.

interface Service {
  image?: string;
  build?: string;
  command?: string[];
  environment?: Record<string, string>;
  volumes?: string[];
  healthcheck?: { test: string[] };
  depends_on?: Record<string, { condition: string }>;
}

const compose = parse(readFileSync('docker-compose.yml', 'utf8')) as {
  services: Record<string, Service>;
};
const services = compose.services;
const envoy = parse(readFileSync('envoy/envoy.yaml', 'utf8')) as {
  static_resources: {
    clusters: {
      name: string;
      load_assignment: {
        endpoints: {
          lb_endpoints: {
            endpoint: { address: { socket_address: { address: string; port_value: number } } };
          }[];
        }[];
      };
    }[];
  };
};
const dockerfile = readFileSync('Dockerfile', 'utf8');

function clusterAddress(name: string): { address: string; port: number } {
  const cluster = envoy.static_resources.clusters.find((c) => c.name === name);
  const socket =
    cluster?.load_assignment.endpoints[0]?.lb_endpoints[0]?.endpoint.address.socket_address;
  if (!socket) throw new Error(`envoy.yaml has no cluster ${name}`);
  return { address: socket.address, port: socket.port_value };
}

describe('docker-compose.yml', () => {
  it('has the four services, with health checks where a dependant waits on them', () => {
    expect(Object.keys(services).sort()).toEqual(['echo', 'envoy', 'redis', 'tollgate']);
    expect(services.redis?.healthcheck).toBeDefined();
    expect(services.envoy?.healthcheck).toBeDefined();
    expect(dockerfile).toMatch(/^HEALTHCHECK [^]*?CMD \["node", "docker\/healthcheck\.mjs"\]/m);
    expect(dockerfile).toMatch(/^COPY docker\/healthcheck\.mjs \.\/docker\/healthcheck\.mjs$/m);
    for (const service of Object.values(services)) {
      for (const [dependency, { condition }] of Object.entries(service.depends_on ?? {})) {
        if (condition === 'service_healthy') {
          const checked =
            services[dependency]?.healthcheck !== undefined || dependency === 'tollgate';
          expect(checked, `${dependency} is waited on for health`).toBe(true);
        }
      }
    }
  });

  it('pins every image to a version', () => {
    for (const [name, service] of Object.entries(services)) {
      if (service.image === undefined) continue;
      expect(service.image, name).toMatch(/:v?\d+(\.\d+)+(-[a-z]+)?$/);
    }
    expect(services.envoy?.image).toMatch(/^envoyproxy\/envoy:v\d+\.\d+\.\d+$/);
  });

  it('mounts files that exist, and gives tollgate the sample rules', () => {
    for (const service of Object.values(services)) {
      for (const volume of service.volumes ?? []) {
        const source = volume.split(':')[0]!;
        expect(() => readFileSync(source), source).not.toThrow();
      }
    }
    const rulesMount = services.tollgate?.volumes?.find((v) =>
      v.startsWith('./envoy/ratelimit.yaml:'),
    );
    expect(rulesMount?.split(':')[1]).toBe(services.tollgate?.environment?.CONFIG_PATH);
    expect(services.envoy?.command).toContain(services.envoy?.volumes?.[0]?.split(':')[1]);
  });

  it("points Envoy's clusters at the services' names and ports", () => {
    expect(clusterAddress('tollgate')).toEqual({ address: 'tollgate', port: 8081 });
    const echo = clusterAddress('upstream');
    expect(echo.address).toBe('echo');
    expect(services.echo?.command).toContain(`-listen=:${echo.port}`);
    expect(services.tollgate?.environment?.REDIS_URL).toBe('redis://redis:6379');
  });

  it.skipIf(spawnSync('docker', ['compose', 'version']).status !== 0)(
    'passes docker compose config (needs the compose plugin)',
    () => {
      const result = spawnSync('docker', ['compose', 'config', '--quiet'], { encoding: 'utf8' });
      expect(result.stderr).toBe('');
      expect(result.status).toBe(0);
    },
  );
});

describe('Dockerfile', () => {
  it('builds in one stage and runs node directly, as a non-root user, with runtime dependencies only', () => {
    expect(dockerfile.match(/^FROM /gm)).toHaveLength(2);
    expect(dockerfile).toMatch(/^RUN npm ci --omit=dev/m);
    expect(dockerfile).toMatch(/^USER node$/m);
    expect(dockerfile).toMatch(/^CMD \["node", "dist\/main.js"\]$/m);
    for (const needed of ['lua', 'proto', 'config']) {
      expect(dockerfile).toMatch(new RegExp(`^COPY ${needed} \\./${needed}$`, 'm'));
    }
  });

  it('has /bin/ratelimit, which starts tollgate, for pod specs written for the reference', () => {
    expect(dockerfile).toMatch(/^COPY --chmod=755 docker\/ratelimit \/bin\/ratelimit$/m);
    const run = spawnSync('sh', ['docker/ratelimit'], {
      encoding: 'utf8',
      env: { PATH: process.env.PATH, TOLLGATE_HOME: process.cwd(), CONFIG_TYPE: 'nonsense' },
      timeout: 30_000,
    });
    expect(run.status).toBe(1);
    expect(run.stderr).toContain("CONFIG_TYPE: 'nonsense' is not one of file, grpc_xds_sotw");
  });
});
