import { BARE_KINDS, startBareServer, type BareKind } from './bareServer.js';

/**
 * A bare server as its own process, so that it gets a whole event loop like tollgate does and its
 * CPU can be read from /proc. It listens on GRPC_PORT, serves BARE_KIND (grpc-js by default; the
 * floors that call Redis ask REDIS_URL), and prints its port once bound.
 */
const kind = (BARE_KINDS as readonly string[]).includes(process.env.BARE_KIND ?? '')
  ? (process.env.BARE_KIND as BareKind)
  : 'grpc-js';
const server = await startBareServer(
  kind,
  '127.0.0.1',
  Number(process.env.GRPC_PORT ?? '0'),
  process.env.REDIS_URL,
);
console.log(JSON.stringify({ port: server.port }));
for (const signal of ['SIGTERM', 'SIGINT'] as const) {
  process.once(signal, () => {
    server.stop();
    process.exit(0);
  });
}
