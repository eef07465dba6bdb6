import { startBareServer, type BareKind } from './bareServer.js';

/**
 * A bare server as its own process, so that it gets a whole event loop like tollgate does and its
 * CPU can be read from /proc. It listens on GRPC_PORT, serves BARE_KIND (grpc-js by default), and
 * prints its port once bound.
 */
const kind: BareKind = process.env.BARE_KIND === 'http2' ? 'http2' : 'grpc-js';
const server = await startBareServer(kind, '127.0.0.1', Number(process.env.GRPC_PORT ?? '0'));
console.log(JSON.stringify({ port: server.port }));
for (const signal of ['SIGTERM', 'SIGINT'] as const) {
  process.once(signal, () => {
    server.stop();
    process.exit(0);
  });
}
