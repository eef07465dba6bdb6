import { createSocket } from 'node:dgram';
import { createServer, type Server, type Socket } from 'node:net';
import { afterEach, describe, expect, it } from 'vitest';
import { callCheck, d, eventually, startTollgate, type Tollgate } from '../support/tollgate.js';

// USE_STATSD=true: the reference's stat names reach a real statsd listener, over TCP (the
// default) and over UDP, every STATS_FLUSH_INTERVAL, with EXTRA_TAGS in the reference's form.

const RULES = `
domain: web
descriptors:
  - key: user
    rate_limit: { unit: minute, requests_per_unit: 2, algorithm: fixed_window }
  - key: ip
    detailed_metric: true
    rate_limit: { unit: minute, requests_per_unit: 5, algorithm: fixed_window }
`;

/** A statsd listener: every line received, summed by name for counters. */
interface Listener {
  port: number;
  lines: string[];
  /** TCP: the connections open now. */
  sockets: Set<Socket>;
  counters(): Map<string, number>;
  close(): Promise<void>;
}

function collect(lines: string[], chunk: string): void {
  for (const line of chunk.split('\n')) if (line !== '') lines.push(line);
}

function countersOf(lines: readonly string[]): Map<string, number> {
  const sums = new Map<string, number>();
  for (const line of lines) {
    const match = /^(.+):(\d+)\|c$/.exec(line);
    if (match) sums.set(match[1] as string, (sums.get(match[1] as string) ?? 0) + Number(match[2]));
  }
  return sums;
}

async function tcpListener(port = 0): Promise<Listener> {
  const lines: string[] = [];
  const sockets = new Set<Socket>();
  const server: Server = createServer((socket) => {
    sockets.add(socket);
    socket.on('close', () => sockets.delete(socket));
    socket.setEncoding('utf8');
    let rest = '';
    socket.on('data', (chunk: string) => {
      const text = rest + chunk;
      const cut = text.lastIndexOf('\n') + 1;
      collect(lines, text.slice(0, cut));
      rest = text.slice(cut);
    });
  });
  await new Promise<void>((resolve) => server.listen(port, '127.0.0.1', resolve));
  const address = server.address();
  if (address === null || typeof address === 'string') throw new Error('no TCP port');
  return {
    port: address.port,
    lines,
    sockets,
    counters: () => countersOf(lines),
    close: () => new Promise((resolve) => server.close(() => resolve())),
  };
}

async function udpListener(): Promise<Listener> {
  const lines: string[] = [];
  const socket = createSocket('udp4');
  socket.on('message', (message) => collect(lines, message.toString('utf8')));
  await new Promise<void>((resolve) => socket.bind(0, '127.0.0.1', resolve));
  return {
    port: socket.address().port,
    lines,
    sockets: new Set(),
    counters: () => countersOf(lines),
    close: () => new Promise((resolve) => socket.close(() => resolve())),
  };
}

let tollgate: Tollgate | undefined;
let listener: Listener | undefined;
afterEach(async () => {
  await tollgate?.stop();
  await listener?.close();
  tollgate = undefined;
  listener = undefined;
});

const TAGS = '.__env=test.__region=eu_1';

/** USE_STATSD to a listener on 127.0.0.1, flushed every 100 ms. */
function statsdTo(port: number, protocol: 'tcp' | 'udp'): Record<string, string> {
  return {
    USE_STATSD: 'true',
    STATSD_HOST: '127.0.0.1',
    STATSD_PORT: String(port),
    STATSD_PROTOCOL: protocol,
    STATS_FLUSH_INTERVAL: '100ms',
  };
}

describe.each([
  ['tcp', tcpListener],
  ['udp', udpListener],
] as const)('statsd over %s', (protocol, listen) => {
  it("sends the reference's stat names, with EXTRA_TAGS, every flush interval", async () => {
    listener = await listen();
    tollgate = await startTollgate({
      rules: RULES,
      env: {
        USE_STATSD: 'true',
        STATSD_HOST: '127.0.0.1',
        STATSD_PORT: String(listener.port),
        ...(protocol === 'udp' ? { STATSD_PROTOCOL: 'udp' } : {}),
        STATS_FLUSH_INTERVAL: '100ms',
        EXTRA_TAGS: 'region:eu.1,env:test',
      },
    });
    for (let i = 0; i < 3; i++)
      await tollgate.check({ domain: 'web', descriptors: [d('user', 'u')] });
    await tollgate.check({ domain: 'web', descriptors: [d('ip', '10.1.2.3')], hits_addend: 5 });
    // A refund counts as total_negative_hits alone.
    await tollgate.check({
      domain: 'web',
      descriptors: [{ ...d('ip', '10.1.2.3'), is_negative_hits: true }],
      hits_addend: 2,
    });
    await tollgate.check({ domain: 'nowhere', descriptors: [d('a', '1'), d('b', '2')] });
    await expect(tollgate.check({ domain: '', descriptors: [d('a', '1')] })).rejects.toThrow();

    const user = 'ratelimit.service.rate_limit.web.user';
    const ip = 'ratelimit.service.rate_limit.web.ip_10_1_2_3';
    const expected = new Map([
      [`${user}.total_hits${TAGS}`, 3],
      [`${user}.within_limit${TAGS}`, 2],
      [`${user}.near_limit${TAGS}`, 1],
      [`${user}.over_limit${TAGS}`, 1],
      [`${ip}.total_hits${TAGS}`, 5],
      [`${ip}.within_limit${TAGS}`, 5],
      [`${ip}.near_limit${TAGS}`, 5],
      [`${ip}.total_negative_hits${TAGS}`, 2],
      [`ratelimit.service.rate_limit.nowhere.domain_not_found${TAGS}`, 2],
      [`ratelimit.service.call.should_rate_limit.service_error${TAGS}`, 1],
      [`ratelimit.service.config_load_success${TAGS}`, 1],
      [`ratelimit_server.ShouldRateLimit.total_requests${TAGS}`, 7],
    ]);
    const l = listener;
    await eventually(async () => {
      const counters = l.counters();
      return [...expected].every(([name, value]) => counters.get(name) === value);
    }).catch(() => {
      expect(Object.fromEntries(l.counters())).toEqual(Object.fromEntries(expected));
    });
    // Nothing else is counted, and each call's time is a timer line in ms.
    expect(Object.fromEntries(l.counters())).toEqual(Object.fromEntries(expected));
    const timers = l.lines.filter((line) =>
      line.startsWith(`ratelimit_server.ShouldRateLimit.response_time${TAGS}:`),
    );
    expect(timers.length).toBeGreaterThanOrEqual(5);
    for (const line of timers) expect(line).toMatch(/:\d+(\.\d+)?\|ms$/);
  });
});

describe('statsd', () => {
  it('is off unless USE_STATSD=true', async () => {
    listener = await udpListener();
    tollgate = await startTollgate({
      rules: RULES,
      env: {
        STATSD_HOST: '127.0.0.1',
        STATSD_PORT: String(listener.port),
        STATSD_PROTOCOL: 'udp',
        STATS_FLUSH_INTERVAL: '50ms',
      },
    });
    await tollgate.check({ domain: 'web', descriptors: [d('user', 'u')] });
    await new Promise((resolve) => setTimeout(resolve, 500));
    expect(listener.lines).toEqual([]);
  });

  it('keeps answering when no statsd server listens', async () => {
    const closed = await tcpListener();
    await closed.close();
    tollgate = await startTollgate({
      rules: RULES,
      env: {
        USE_STATSD: 'true',
        STATSD_HOST: '127.0.0.1',
        STATSD_PORT: String(closed.port),
        STATS_FLUSH_INTERVAL: '20ms',
      },
    });
    for (let i = 0; i < 20; i++) {
      const answer = await callCheck(tollgate.client, {
        domain: 'web',
        descriptors: [d('user', `u${i}`)],
      });
      expect(answer.overall_code).toBe('OK');
      await new Promise((resolve) => setTimeout(resolve, 10));
    }
  });
});

describe('statsd over tcp, when the server restarts', () => {
  it('sends again within 5 s of its return, and counts the flushes lost meanwhile', async () => {
    const first = await tcpListener();
    const port = first.port;
    tollgate = await startTollgate({ rules: RULES, env: statsdTo(port, 'tcp') });
    const running = tollgate;
    let stop = false;
    const traffic = (async () => {
      for (let i = 0; !stop; i++) {
        await running.check({ domain: 'web', descriptors: [d('user', `u${i % 50}`)] });
        await new Promise((resolve) => setTimeout(resolve, 20));
      }
    })();
    const dropped = async () => {
      const text = await (await fetch(`${running.httpUrl}/metrics`)).text();
      return Number(/^tollgate_statsd_dropped_flushes_total (\d+)/m.exec(text)?.[1] ?? NaN);
    };
    try {
      await eventually(async () => first.lines.length > 0);
      const closed = first.close(); // no new connections, and the one open is cut
      for (const socket of first.sockets) socket.destroy();
      await closed;
      await eventually(async () => (await dropped()) > 0);
      // A new server on the same port, 1 s later.
      await new Promise((resolve) => setTimeout(resolve, 1_000));
      listener = await tcpListener(port);
      const back = Date.now();
      const l = listener;
      await eventually(async () => l.lines.length > 0, 5_000);
      expect(Date.now() - back).toBeLessThan(5_000);
    } finally {
      stop = true;
      await traffic;
    }
  });
});

describe("the reference's local cache, over statsd", () => {
  it('sends its eight gauges under ratelimit.localcache, every flush', async () => {
    listener = await udpListener();
    tollgate = await startTollgate({
      rules: RULES,
      env: {
        ...statsdTo(listener.port, 'udp'),
        COMPAT_MODE: 'reference',
        LOCAL_CACHE_SIZE_IN_BYTES: '1048576',
      },
    });
    // 2 a minute: two pass, the third goes over and is remembered, the fourth is answered by
    // the cache.
    for (let i = 0; i < 4; i++)
      await tollgate.check({ domain: 'web', descriptors: [d('user', 'u')] });
    const l = listener;
    const latest = (gauge: string) => {
      const lines = l.lines.filter((line) => line.startsWith(`ratelimit.localcache.${gauge}:`));
      return lines.at(-1)?.replace(/^[^:]+:/, '');
    };
    await eventually(async () => latest('hitCount') === '1|g');
    expect({
      hitCount: latest('hitCount'),
      missCount: latest('missCount'),
      lookupCount: latest('lookupCount'),
      entryCount: latest('entryCount'),
      evacuateCount: latest('evacuateCount'),
      expiredCount: latest('expiredCount'),
      overwriteCount: latest('overwriteCount'),
    }).toEqual({
      hitCount: '1|g',
      missCount: '3|g',
      lookupCount: '4|g',
      entryCount: '1|g',
      evacuateCount: '0|g',
      expiredCount: '0|g',
      overwriteCount: '0|g',
    });
    // A last access, in Unix seconds.
    const accessed = Number(latest('averageAccessTime')?.replace('|g', ''));
    expect(Math.abs(accessed - Date.now() / 1000)).toBeLessThan(60);
  });
});
