import { startBareServer } from './bareServer.js';

/**
 * The bare grpc-js server as its own process, so that it gets a whole event loop like tollgate
 * does and its CPU can be read from /proc. It listens on GRPC_PORT and prints its port once bound.
 */
const server = await startBareServer('127.0.0.1', Number(process.env.GRPC_PORT ?? '0'));
console.log(JSON.stringify({ port: server.port }));
for (const signal of ['SIGTERM', 'SIGINT'] as const) {
  process.once(signal, () => {
    server.stop();
    process.exit(0);
  });
}
