import { describe, expect, it } from 'vitest';
import { createPeerTable, peerKey } from '../../src/servers/grpc/peerResets.js';

describe('peerKey', () => {
  it.each([
    ['127.0.0.1', '127.0.0.1'],
    ['::ffff:10.1.2.3', '10.1.2.3'],
    ['::1', '0:0:0:0::/64'],
    ['2001:db8:1:2:aaaa:bbbb:cccc:dddd', '2001:db8:1:2::/64'],
    ['2001:0db8:0001:0002::5', '2001:db8:1:2::/64'],
    ['2001:db8::7', '2001:db8:0:0::/64'],
    ['fe80::1%eth0', 'fe80:0:0:0::/64'],
  ])('%s is the peer %s', (address, key) => expect(peerKey(address)).toBe(key));

  it('a Unix socket has no peer', () => {
    expect(peerKey(undefined)).toBeUndefined();
    expect(peerKey('')).toBeUndefined();
  });
});

describe('the table of peers', () => {
  const limits = { maxResets: 100, periodMs: 10_000, coolDownMs: 10_000, maxPeers: 3 };

  it('cools a peer down past its budget, refills it evenly from the end of the cool-down', () => {
    const table = createPeerTable(limits);
    for (let i = 0; i < 100; i++) expect(table.reset('a', 0)).toBe(false);
    expect(table.cooling('a', 0)).toBe(false);
    expect(table.reset('a', 0)).toBe(true);
    expect(table.cooling('a', 9_999)).toBe(true);
    expect(table.reset('a', 5_000)).toBe(true);
    // Another peer has a budget of its own.
    expect(table.reset('b', 5_000)).toBe(false);
    expect(table.cooling('a', 10_000)).toBe(false);
    // 1 s after the cool-down: 10 resets, then cooling again.
    for (let i = 0; i < 10; i++) expect(table.reset('a', 11_000)).toBe(false);
    expect(table.reset('a', 11_000)).toBe(true);
  });

  it('spreads the budget over the period: 10 a second go on forever', () => {
    const table = createPeerTable(limits);
    for (let ms = 0; ms < 60_000; ms += 100) expect(table.reset('a', ms)).toBe(false);
  });

  it('holds at most maxPeers, forgetting the first one in; the sweep forgets whole budgets', () => {
    const table = createPeerTable(limits);
    for (const peer of ['a', 'b', 'c', 'd']) table.reset(peer, 0);
    expect(table.size()).toBe(3);
    for (let i = 0; i < 100; i++) table.reset('d', 0);
    expect(table.cooling('d', 1)).toBe(true);
    table.sweep(5_000);
    expect(table.size()).toBe(1); // b and c refilled; d cools down
    table.sweep(20_000);
    expect(table.size()).toBe(0);
  });
});
