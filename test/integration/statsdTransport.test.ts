import { createSocket, type Socket as UdpSocket } from 'node:dgram';
import { createServer, type Server, type Socket } from 'node:net';
import { setTimeout as sleep } from 'node:timers/promises';
import { afterEach, describe, expect, it } from 'vitest';
import {
  createTcpTransport,
  createUdpTransport,
  type StatsdTransport,
} from '../../src/observability/statsdTransport.js';
import { freePort } from '../support/ports.js';
import { eventually } from '../support/tollgate.js';

// The statsd socket against real statsd listeners that restart, start late and stop reading:
// sends must resume by themselves within 5 s of the server coming back, and what waits for a
// server that reads nothing is bounded.

/** A statsd server on a fixed port that can go away, come back, and stop reading. */
interface Listener {
  lines: string[];
  start(): Promise<void>;
  /** Closes the listener and every connection, as a restart does. */
  stop(): Promise<void>;
  /** Stops reading (TCP: every connection; UDP: the socket), or reads again. */
  pause(): void;
  resume(): void;
}

function collect(lines: string[], text: string): void {
  for (const line of text.split('\n')) if (line !== '') lines.push(line);
}

function tcpListener(port: number): Listener {
  const lines: string[] = [];
  let server: Server | undefined;
  const sockets = new Set<Socket>();
  let paused = false;
  return {
    lines,
    start: () =>
      new Promise((resolve) => {
        server = createServer((socket) => {
          sockets.add(socket);
          socket.on('close', () => sockets.delete(socket));
          socket.on('error', () => undefined);
          socket.setEncoding('utf8');
          socket.on('data', (chunk: string) => collect(lines, chunk));
          if (paused) socket.pause();
        });
        server.listen(port, '127.0.0.1', () => resolve());
      }),
    stop: () =>
      new Promise((resolve) => {
        for (const socket of sockets) socket.destroy();
        if (server === undefined) return resolve();
        server.close(() => resolve());
        server = undefined;
      }),
    pause: () => {
      paused = true;
      for (const socket of sockets) socket.pause();
    },
    resume: () => {
      paused = false;
      for (const socket of sockets) socket.resume();
    },
  };
}

function udpListener(port: number): Listener {
  const lines: string[] = [];
  let socket: UdpSocket | undefined;
  let reading = true;
  return {
    lines,
    start: () =>
      new Promise((resolve) => {
        socket = createSocket('udp4');
        socket.on('message', (message) => {
          if (reading) collect(lines, message.toString('utf8'));
        });
        socket.bind(port, '127.0.0.1', () => resolve());
      }),
    stop: () =>
      new Promise((resolve) => {
        if (socket === undefined) return resolve();
        socket.close(() => resolve());
        socket = undefined;
      }),
    // A UDP server that does not read loses what arrives meanwhile, as the kernel drops it.
    pause: () => (reading = false),
    resume: () => (reading = true),
  };
}

let transport: StatsdTransport | undefined;
let listener: Listener | undefined;
afterEach(async () => {
  await transport?.close();
  await listener?.stop();
  transport = listener = undefined;
});

/** Sends a numbered line every 20 ms until `until` says stop; returns what send answered. */
function sendEvery20ms(target: StatsdTransport): { stop(): void; dropped: () => number } {
  let n = 0;
  let dropped = 0;
  const timer = setInterval(() => {
    if (!target.send(`tollgate.test:${++n}|c`)) dropped++;
  }, 20);
  return { stop: () => clearInterval(timer), dropped: () => dropped };
}

/** Waits for a line sent after `mark` lines were seen, and returns how long it took. */
async function nextLine(target: Listener, timeoutMs = 5_000): Promise<number> {
  const seen = target.lines.length;
  const started = Date.now();
  await eventually(async () => target.lines.length > seen, timeoutMs);
  return Date.now() - started;
}

type Listen = (port: number) => Listener;
type Create = (options: {
  host: string;
  port: number;
  onError(error: Error): void;
}) => StatsdTransport;

/**
 * A transport to a listener on a free port (started first unless `late`), sending a line every
 * 20 ms while `body` runs.
 */
async function whileSending(
  listen: Listen,
  create: Create,
  late: boolean,
  body: (server: Listener) => Promise<void>,
): Promise<void> {
  const port = await freePort();
  listener = listen(port);
  if (!late) await listener.start();
  transport = create({ host: '127.0.0.1', port, onError: () => undefined });
  const sender = sendEvery20ms(transport);
  try {
    await body(listener);
  } finally {
    sender.stop();
  }
}

describe.each([
  ['tcp', tcpListener, createTcpTransport],
  ['udp', udpListener, createUdpTransport],
] as const)('statsd over %s', (_protocol, listen, create) => {
  it('sends once a server that started late is up, within 5 s', async () => {
    await whileSending(listen, create, true, async (server) => {
      await sleep(1_500); // refused, and refused again, before the server exists
      await server.start();
      expect(await nextLine(server)).toBeLessThan(5_000);
    });
  });

  it('sends again after the server restarts, within 5 s, each time', async () => {
    await whileSending(listen, create, false, async (server) => {
      await nextLine(server);
      for (let restart = 0; restart < 3; restart++) {
        await server.stop();
        await sleep(1_000 + restart * 1_000); // down for 1, 2, then 3 s
        await server.start();
        expect(await nextLine(server)).toBeLessThan(5_000);
      }
    });
  });

  it('sends again when a server that stopped reading reads again', async () => {
    await whileSending(listen, create, false, async (server) => {
      await nextLine(server);
      server.pause();
      await sleep(1_000);
      server.resume();
      expect(await nextLine(server)).toBeLessThan(5_000);
    });
  });
});

describe('statsd over tcp, to a server that reads nothing', () => {
  it('holds a bounded backlog and drops the rest, then sends again when it reads', async () => {
    const port = await freePort();
    listener = tcpListener(port);
    listener.pause();
    await listener.start();
    transport = createTcpTransport({ host: '127.0.0.1', port, onError: () => undefined });
    const tcp = transport;
    await eventually(async () => tcp.send('tollgate.test:1|c'));
    // 64 MiB offered, far past what the kernel's buffers and the backlog can hold.
    const packet = `tollgate.test:1|c\n`.repeat(450);
    let taken = 0;
    let dropped = 0;
    for (let i = 0; i < 8_000; i++) {
      if (tcp.send(packet)) taken++;
      else dropped++;
      if (i % 100 === 0) await new Promise((resolve) => setImmediate(resolve));
    }
    expect(dropped).toBeGreaterThan(0);
    // What was taken fits in the kernel's buffers and the 256 KiB backlog, not 64 MiB.
    expect(taken * packet.length).toBeLessThan(32 * 1024 * 1024);
    const before = process.memoryUsage().rss;
    listener.resume();
    await eventually(async () => tcp.send('tollgate.test:2|c'), 5_000);
    await eventually(async () => listener!.lines.includes('tollgate.test:2|c'), 5_000);
    expect(process.memoryUsage().rss - before).toBeLessThan(64 * 1024 * 1024);
  });
});
