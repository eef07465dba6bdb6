import { spawn } from 'node:child_process';

/**
 * `clients` loops of GET `url`, each sending its next request once the last answer is read, for
 * `ms`; in a process of its own, so that reading the answers does not slow this process's calls.
 * Resolves with how many answers came with each status and body size, e.g. `{ '200 1024': 7 }`.
 */
export function httpFlood(
  url: string,
  clients: number,
  ms: number,
): Promise<Record<string, number>> {
  const script = `
    const [url, clients, ms] = [process.argv[1], Number(process.argv[2]), Number(process.argv[3])];
    const until = performance.now() + ms;
    const seen = {};
    const loop = async () => {
      while (performance.now() < until) {
        try {
          const response = await fetch(url);
          const key = response.status + ' ' + (await response.arrayBuffer()).byteLength;
          seen[key] = (seen[key] ?? 0) + 1;
        } catch (error) {
          seen[String(error.cause?.code ?? error)] = (seen[String(error.cause?.code ?? error)] ?? 0) + 1;
        }
      }
    };
    Promise.all(Array.from({ length: clients }, loop)).then(() => console.log(JSON.stringify(seen)));
  `;
  return new Promise((resolve, reject) => {
    const child = spawn(process.execPath, ['-e', script, url, String(clients), String(ms)], {
      stdio: ['ignore', 'pipe', 'inherit'],
    });
    let out = '';
    child.stdout.on('data', (chunk: Buffer) => (out += chunk.toString()));
    child.once('error', reject);
    child.once('close', (code) =>
      code === 0
        ? resolve(JSON.parse(out) as Record<string, number>)
        : reject(new Error(`the flood exited ${code}: ${out}`)),
    );
  });
}
