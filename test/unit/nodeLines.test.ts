// The supported Node lines are named in several places: package.json's engines (both packages),
// scripts/node-line.sh (the releases that CI installs, and the image's line), the Dockerfile's
// base image, and the docs. They must agree.
import { spawnSync } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { describe, expect, it } from 'vitest';

const read = (path: string) => readFileSync(path, 'utf8');
const nodeLine = read('scripts/node-line.sh');
const releases = Object.fromEntries(
  [...(/RELEASES=\(([^)]*)\)/.exec(nodeLine)?.[1] ?? '').matchAll(/\[(\d+)\]=(\S+)/g)].map(
    (match) => [match[1], match[2]],
  ),
) as Record<string, string>;
const imageLine = /^IMAGE_LINE=(\d+)$/m.exec(nodeLine)?.[1];
const lines = Object.keys(releases).sort((a, b) => Number(a) - Number(b));

describe('the supported Node lines', () => {
  it('are 22, 24 and 26, each pinned to a release of its own line', () => {
    expect(lines).toEqual(['22', '24', '26']);
    for (const line of lines) expect(releases[line]).toMatch(new RegExp(`^${line}\\.\\d+\\.\\d+$`));
    expect(lines).toContain(imageLine);
  });

  it("are what both packages' engines accept", () => {
    const engines = lines.map((line) => `^${line}`).join(' || ');
    for (const manifest of ['package.json', 'packages/client/package.json']) {
      expect((JSON.parse(read(manifest)) as { engines: { node: string } }).engines.node).toBe(
        engines,
      );
    }
  });

  it("run the image on the image's line, from a base pinned by digest", () => {
    const dockerfile = read('Dockerfile');
    const froms = [...dockerfile.matchAll(/^FROM (\S+)/gm)].map((match) => match[1]);
    expect(froms).toHaveLength(2);
    expect(froms[0]).toMatch(
      new RegExp(`^node:${imageLine}\\.\\d+\\.\\d+-bookworm-slim@sha256:[0-9a-f]{64}$`),
    );
    expect(froms[1]).toBe(froms[0]);
    // The service loads its own copy of the client: nothing of packages/client runs in the image.
    expect(dockerfile).not.toMatch(/^COPY --from=build \/app\/packages\//m);
  });

  it('are the lines the docs name', () => {
    const named = /Node\.js (\d+), (\d+) (?:and|or) (\d+)/.exec(read('README.md'));
    expect(named?.slice(1)).toEqual(lines);
    for (const page of ['packages/client/README.md', 'SECURITY.md']) {
      expect(/Node (\d+), (\d+) (?:and|or) (\d+)/.exec(read(page))?.slice(1), page).toEqual(lines);
    }
    expect(read('docs/development.md')).toContain(`scripts/node-line.sh`);
  });

  it('answer `--others` with the lines beside the image, and refuse an unsupported one', () => {
    const others = spawnSync('bash', ['scripts/node-line.sh', '--others'], { encoding: 'utf8' });
    expect(others.stdout.trim().split('\n')).toEqual(lines.filter((line) => line !== imageLine));
    const old = spawnSync('bash', ['scripts/node-line.sh', '20'], { encoding: 'utf8' });
    expect(old.status).toBe(2);
    expect(old.stderr).toContain('Node 20 is not a supported line');
  });
});
