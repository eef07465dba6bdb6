// The image's HEALTHCHECK: asks the service's own /healthcheck, on the PORT and HOST it was given
// (a wildcard address is reached through loopback). Exit 0 when it answers 200, 1 otherwise.
const host = process.env.HOST || '0.0.0.0';
const port = process.env.PORT || '8080';
const reachable = host === '0.0.0.0' ? '127.0.0.1' : host === '::' ? '::1' : host;
const url = `http://${reachable.includes(':') ? `[${reachable}]` : reachable}:${port}/healthcheck`;

try {
  const answer = await fetch(url, { signal: AbortSignal.timeout(1_500) });
  process.exitCode = answer.ok ? 0 : 1;
  if (!answer.ok) console.error(`${url} answered ${answer.status}`);
} catch (error) {
  console.error(`${url}: ${error.cause?.message ?? error.message}`);
  process.exitCode = 1;
}
