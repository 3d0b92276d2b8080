// Clock faults for the triggerer's shared timer queue, on a fake clock (vitest's): a moment
// never fires before the wall clock reaches it, and a wall-clock jump forwards or backwards
// neither loses nor repeats a wake-up. The queue's timers keep counting monotonic time across a
// jump; only Date.now() jumps, as when NTP steps the clock.
import { afterEach, beforeEach, describe, expect, it, vi } from 'vitest';
import { DeadlineQueue, type DeadlineWaiter } from '../../../src/daemons/triggerer/deadline-queue.ts';

interface Waiter extends DeadlineWaiter {
  readonly name: string;
}

const START = Date.UTC(2026, 10, 24, 12, 0, 0);

function waiter(name: string): Waiter {
  return { name, wakeAt: 0, heapIndex: -1, resolveWait: null, rejectWait: null };
}

describe('DeadlineQueue on a faulty clock', () => {
  let queue: DeadlineQueue<Waiter>;
  /** Each wake-up: who, and the wall clock when it resumed. */
  let woke: { name: string; at: number }[];
  const sleep = (w: Waiter, at: number) =>
    queue.wait(w, at).then(() => {
      woke.push({ name: w.name, at: Date.now() });
    });

  beforeEach(() => {
    vi.useFakeTimers({ toFake: ['setTimeout', 'clearTimeout', 'setImmediate', 'clearImmediate', 'Date', 'performance'] });
    vi.setSystemTime(START);
    queue = new DeadlineQueue<Waiter>();
    woke = [];
  });
  afterEach(() => {
    queue.close();
    vi.useRealTimers();
  });

  it('never wakes a waiter before its moment, however the time is stepped', async () => {
    const moments = [1, 49, 50, 51, 999, 1000, 1001, 4321, 60_000, 3_600_000].map((offset) => START + offset);
    moments.forEach((at, i) => void sleep(waiter(`w${i}`), at));
    // Coarse and fine steps: a timer armed early by the kernel's lateness margin must not resolve early.
    for (let elapsed = 0; elapsed <= 3_600_000 + 1000; elapsed += elapsed < 5000 ? 1 : 997) {
      await vi.advanceTimersByTimeAsync(elapsed < 5000 ? 1 : 997);
    }
    expect(woke.map((w) => w.name).sort()).toEqual(moments.map((_, i) => `w${i}`).sort());
    for (const { name, at } of woke) expect(at, name).toBeGreaterThanOrEqual(moments[Number(name.slice(1))]!);
  });

  it('a jump forwards wakes what the new time passed, once, and the rest at their moment', async () => {
    void sleep(waiter('soon'), START + 1000);
    void sleep(waiter('passed'), START + 30_000);
    void sleep(waiter('later'), START + 120_000);
    await vi.advanceTimersByTimeAsync(1000);
    expect(woke.map((w) => w.name)).toEqual(['soon']);
    // The wall clock steps 60 s ahead; the armed timer still counts monotonic time.
    vi.setSystemTime(Date.now() + 60_000);
    await vi.advanceTimersByTimeAsync(30_000);
    expect(woke.map((w) => w.name)).toEqual(['soon', 'passed']);
    await vi.advanceTimersByTimeAsync(120_000);
    expect(woke.map((w) => w.name)).toEqual(['soon', 'passed', 'later']);
    expect(woke.find((w) => w.name === 'later')!.at).toBeGreaterThanOrEqual(START + 120_000);
    await vi.advanceTimersByTimeAsync(600_000);
    expect(woke).toHaveLength(3);
  });

  it('a jump backwards does not fire a wake-up early, nor lose it: it comes when the wall clock reaches its moment', async () => {
    void sleep(waiter('moment'), START + 5000);
    await vi.advanceTimersByTimeAsync(1000);
    // NTP steps the clock 60 s back: the timer armed for 4 s of monotonic time fires, finds the
    // moment still 64 s ahead on the wall clock, and re-arms.
    vi.setSystemTime(Date.now() - 60_000);
    await vi.advanceTimersByTimeAsync(4000);
    expect(woke).toEqual([]);
    await vi.advanceTimersByTimeAsync(59_000);
    expect(woke).toEqual([]);
    await vi.advanceTimersByTimeAsync(1001);
    expect(woke.map((w) => w.name)).toEqual(['moment']);
    expect(woke[0]!.at).toBeGreaterThanOrEqual(START + 5000);
    await vi.advanceTimersByTimeAsync(600_000);
    expect(woke).toHaveLength(1);
  });

  it('a waiter cancelled around a jump never wakes', async () => {
    const cancelled = waiter('cancelled');
    const outcome = queue.wait(cancelled, START + 2000).then(
      () => 'woke',
      () => 'cancelled',
    );
    vi.setSystemTime(START + 10_000);
    queue.cancel(cancelled, new Error('cancelled'));
    await vi.advanceTimersByTimeAsync(5000);
    await expect(outcome).resolves.toBe('cancelled');
  });
});
