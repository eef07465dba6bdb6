// `npm run worst-memory`: what one hostile client can make tollgate hold with the default bounds.
// It starts tollgate (`node dist/main.js`, built first if needed, on the in-memory store) on free
// ports on 127.0.0.1 with no settings but its ports, and measures its RSS (from /proc) while one
// client process:
//   1. holds GRPC_MAX_CONNECTIONS (10,000) idle HTTP/2 connections;
//   2. holds GRPC_MAX_CALLS (5,000) calls on 50 connections, each with 15 KB of headers (the
//      header list is capped at 16 KB) and part of a message, never finished, so that together
//      they hold GRPC_MAX_RECEIVING_BYTES (64 MiB) of requests still arriving;
//   3. holds HTTP_MAX_CONNECTIONS (1,000) connections to the HTTP port, each sending a header
//      line every second and never ending the request.
// It prints one line per step and exits 0; the numbers go to docs/operations.md ("gRPC server").
import { Buffer } from 'node:buffer';
import { execFileSync, spawn } from 'node:child_process';
import { readFileSync } from 'node:fs';
import http2 from 'node:http2';
import { connect } from 'node:net';
import { dirname, join } from 'node:path';
import { clearInterval, setInterval } from 'node:timers';
import { setTimeout as sleep } from 'node:timers/promises';
import { fileURLToPath } from 'node:url';
import { freePort } from './freePort.mjs';

const root = join(dirname(fileURLToPath(import.meta.url)), '..');
execFileSync(process.execPath, [join(root, 'scripts/build-if-needed.mjs')], {
  cwd: root,
  stdio: 'inherit',
});

const grpcPort = await freePort();
const httpPort = await freePort();
const child = spawn(process.execPath, ['dist/main.js'], {
  cwd: root,
  env: {
    ...process.env,
    GRPC_HOST: '127.0.0.1',
    GRPC_PORT: String(grpcPort),
    HOST: '127.0.0.1',
    PORT: String(httpPort),
    LOG_LEVEL: 'warn',
  },
  stdio: ['ignore', 'ignore', 'inherit'],
});
const stop = () => child.kill('SIGKILL');
process.on('exit', stop);

const rssMb = () =>
  Number(/^VmRSS:\s+(\d+) kB/m.exec(readFileSync(`/proc/${child.pid}/status`, 'utf8'))[1]) / 1024;
async function settle() {
  await sleep(1_500);
  return rssMb();
}

for (let i = 0; ; i++) {
  const ok = await globalThis.fetch(`http://127.0.0.1:${httpPort}/healthcheck`).then(
    (r) => r.ok,
    () => false,
  );
  if (ok) break;
  if (i > 100) throw new Error('tollgate did not start');
  await sleep(100);
}
await sleep(1_000);
const idle = await settle();
console.log(`tollgate idle: RSS ${idle.toFixed(0)} MB`);

function open() {
  const session = http2.connect(`http://127.0.0.1:${grpcPort}`);
  session.on('error', () => undefined);
  return new Promise((resolve) => {
    session.once('remoteSettings', () => resolve(session));
    session.once('close', () => resolve(session));
  });
}

// 1. Idle connections.
const idleSessions = [];
for (let i = 0; i < 10_000; i += 200) {
  idleSessions.push(...(await Promise.all(Array.from({ length: 200 }, open))));
}
const held = idleSessions.filter((s) => !s.closed && !s.destroyed).length;
const withConnections = await settle();
console.log(
  `${held} idle gRPC connections: RSS ${withConnections.toFixed(0)} MB ` +
    `(+${(((withConnections - idle) * 1024) / held).toFixed(1)} KB a connection)`,
);
for (const session of idleSessions) session.destroy();
await sleep(2_000);

// 2. Half-open calls with large headers and part of a message.
const before = await settle();
const CALLS = 5_000;
const sessions = await Promise.all(Array.from({ length: CALLS / 100 }, open));
const bigHeader = 'x'.repeat(15 * 1024);
const partial = Buffer.alloc(Math.floor((64 * 1024 * 1024) / CALLS) - 64, 1);
let reset = 0;
for (const session of sessions) {
  for (let i = 0; i < 100; i++) {
    const stream = session.request(
      {
        ':method': 'POST',
        ':path': '/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit',
        'content-type': 'application/grpc',
        te: 'trailers',
        'x-padding': `${i}${bigHeader}`,
      },
      { endStream: false },
    );
    stream.on('error', () => undefined);
    stream.once('close', () => (reset += 1));
    stream.write(Buffer.from([0, 0, 0x10, 0, 0])); // declares 1 MiB
    stream.write(partial);
  }
}
await sleep(3_000);
const withCalls = await settle();
console.log(
  `${CALLS} half-open calls, 15 KB of headers and ${(partial.length / 1024).toFixed(1)} KB of message each: ` +
    `RSS ${before.toFixed(0)} → ${withCalls.toFixed(0)} MB (+${(((withCalls - before) * 1024) / CALLS).toFixed(1)} KB a call); ` +
    `${reset} reset so far`,
);
for (const session of sessions) session.destroy();
await sleep(2_000);

// 3. Slow HTTP clients.
const beforeHttp = await settle();
const slow = [];
for (let i = 0; i < 1_000; i++) {
  const socket = connect(httpPort, '127.0.0.1');
  socket.on('error', () => undefined);
  socket.write('GET /healthcheck HTTP/1.1\r\nHost: x\r\n');
  slow.push(socket);
}
const drip = setInterval(() => {
  for (const socket of slow) if (!socket.destroyed) socket.write('X-Slow: 1\r\n');
}, 1_000);
await sleep(3_000);
const withHttp = await settle();
console.log(
  `1,000 slow HTTP connections: RSS ${beforeHttp.toFixed(0)} → ${withHttp.toFixed(0)} MB; ` +
    `${slow.filter((s) => s.destroyed).length} closed by tollgate so far`,
);
clearInterval(drip);
for (const socket of slow) socket.destroy();
stop();
process.exit(0);
