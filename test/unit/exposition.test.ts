import { describe, expect, it } from 'vitest';
import { shareBuilds } from '../../src/observability/exposition.js';

/** A build that resolves when told, counting its calls; a clock that moves when told. */
function harness() {
  const clock = { now: 0 };
  const sleeps: number[] = [];
  let wake: () => void = () => {};
  const builds: { resolve: (value: number) => void }[] = [];
  const shared = shareBuilds(() => new Promise<number>((resolve) => builds.push({ resolve })), {
    clock: () => clock.now,
    sleep: (ms) =>
      new Promise<void>((resolve) => {
        sleeps.push(ms);
        wake = () => {
          clock.now += ms;
          resolve();
        };
      }),
  });
  return { clock, sleeps, builds, shared, wake: () => wake() };
}

const turn = () => new Promise((resolve) => setImmediate(resolve));

describe('shareBuilds', () => {
  it('answers callers that come during a build with the next build, shared', async () => {
    const h = harness();
    const first = h.shared();
    await turn();
    expect(h.builds).toHaveLength(1);
    // Two callers during the first build: both wait for one more.
    const second = h.shared();
    const third = h.shared();
    h.clock.now = 10;
    h.builds[0]!.resolve(1);
    expect(await first).toBe(1);
    await turn();
    // The first build took 10 ms: the next waits 9 times that.
    expect(h.sleeps).toEqual([90]);
    expect(h.builds).toHaveLength(1);
    h.wake();
    await turn();
    expect(h.builds).toHaveLength(2);
    h.builds[1]!.resolve(2);
    expect([await second, await third]).toEqual([2, 2]);
  });

  it('pauses at most 1 s, and starts at once when the last build is long past', async () => {
    const h = harness();
    const first = h.shared();
    await turn();
    h.clock.now = 500;
    h.builds[0]!.resolve(1);
    await first;
    const second = h.shared();
    await turn();
    expect(h.sleeps).toEqual([1_000]);
    h.wake();
    await turn();
    h.builds[1]!.resolve(2);
    expect(await second).toBe(2);
    h.clock.now += 5_000;
    const third = h.shared();
    await turn();
    expect(h.sleeps).toHaveLength(1);
    h.builds[2]!.resolve(3);
    expect(await third).toBe(3);
  });

  it('fails the callers of a failed build, and builds again for the next', async () => {
    let calls = 0;
    const shared = shareBuilds(async () => {
      calls++;
      if (calls === 1) throw new Error('no snapshot');
      return calls;
    });
    await expect(shared()).rejects.toThrow('no snapshot');
    expect(await shared()).toBe(2);
  });
});
