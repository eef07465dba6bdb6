import { randomInt } from 'node:crypto';
import { createServer } from 'node:net';

/**
 * Ports for the servers that the tests and the bench start.
 *
 * Listening on port 0 gets a port from the kernel's ephemeral range (32768 to 60999 on Linux),
 * the same range that outgoing connections take their local ports from. Between finding such a
 * port free and the spawned server binding it, any client connection on the machine may take
 * it, and the server fails with EADDRINUSE. These ports come from below that range instead: a
 * block of its own for each vitest worker, so that test files running in parallel never pick the
 * same one, walked from a random start, and each is checked free before it is handed out.
 */
const FIRST_PORT = 20_000;
const BLOCK_SIZE = 3_000;
const BLOCKS = 4;

const block = Number(process.env.VITEST_POOL_ID ?? 0) % BLOCKS;
let offset = randomInt(BLOCK_SIZE);

function canListen(port: number): Promise<boolean> {
  return new Promise((resolve) => {
    const server = createServer();
    server.once('error', () => resolve(false));
    server.listen(port, '127.0.0.1', () => server.close(() => resolve(true)));
  });
}

export async function freePort(): Promise<number> {
  for (let tried = 0; tried < BLOCK_SIZE; tried++) {
    const port = FIRST_PORT + block * BLOCK_SIZE + (offset % BLOCK_SIZE);
    offset++;
    if (await canListen(port)) return port;
  }
  throw new Error(`no free port in ${FIRST_PORT + block * BLOCK_SIZE}+${BLOCK_SIZE}`);
}
