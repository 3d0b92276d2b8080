// The pause of the daemons' loops, on a fake clock: a wake ends it early, a wake with no pause
// under way ends the next one at once, and a floor keeps a burst of wakes from ending it before
// the floor (how the scheduler and the triggerer space the passes wake-ups start).
import { spawnSync } from 'node:child_process';
import path from 'node:path';
import { pathToFileURL } from 'node:url';
import { afterEach, beforeEach, describe, expect, it, vi } from 'vitest';
import { REPO_ROOT } from '../support/processes.ts';
import { InterruptibleSleep } from '../../src/vocabulary/time/interruptible-sleep.ts';

describe('InterruptibleSleep', () => {
  beforeEach(() => {
    vi.useFakeTimers({ toFake: ['setTimeout', 'clearTimeout', 'performance'] });
  });
  afterEach(() => {
    vi.useRealTimers();
  });

  /** Sleeps, and records when (fake ms since the start) the pause ended. */
  function timed(pause: InterruptibleSleep, ms: number, floorMs?: number): { endedAt: number | null } {
    const from = performance.now();
    const result: { endedAt: number | null } = { endedAt: null };
    void pause.sleep(ms, floorMs).then(() => {
      result.endedAt = performance.now() - from;
    });
    return result;
  }

  it('lasts its time unless woken, and a wake ends it at once without a floor', async () => {
    const pause = new InterruptibleSleep();
    const whole = timed(pause, 1000);
    await vi.advanceTimersByTimeAsync(999);
    expect(whole.endedAt).toBeNull();
    await vi.advanceTimersByTimeAsync(1);
    expect(whole.endedAt).toBe(1000);

    const woken = timed(pause, 1000);
    await vi.advanceTimersByTimeAsync(30);
    pause.wake();
    await vi.advanceTimersByTimeAsync(0);
    expect(woken.endedAt).toBe(30);
  });

  it('keeps a wake that came while no pause was under way for the next pause', async () => {
    const pause = new InterruptibleSleep();
    pause.wake();
    const next = timed(pause, 1000);
    await vi.advanceTimersByTimeAsync(0);
    expect(next.endedAt).toBe(0);
    // Used up: the one after lasts its time.
    const after = timed(pause, 500);
    await vi.advanceTimersByTimeAsync(500);
    expect(after.endedAt).toBe(500);
  });

  it('ends no sooner than its floor however many wakes come before it, and at once for a wake after it', async () => {
    const pause = new InterruptibleSleep();
    const burst = timed(pause, 10_000, 100);
    for (let at = 0; at < 90; at += 10) {
      pause.wake();
      await vi.advanceTimersByTimeAsync(10);
    }
    expect(burst.endedAt).toBeNull();
    await vi.advanceTimersByTimeAsync(10);
    expect(burst.endedAt).toBe(100);

    const late = timed(pause, 10_000, 100);
    await vi.advanceTimersByTimeAsync(250);
    expect(late.endedAt).toBeNull();
    pause.wake();
    await vi.advanceTimersByTimeAsync(0);
    expect(late.endedAt).toBe(250);

    // A wake kept from before the pause still waits for the floor; a floor past the time does not stretch it.
    pause.wake();
    const kept = timed(pause, 10_000, 60);
    await vi.advanceTimersByTimeAsync(60);
    expect(kept.endedAt).toBe(60);
    const short = timed(pause, 40, 100);
    await vi.advanceTimersByTimeAsync(40);
    expect(short.endedAt).toBe(40);
  });

  it('unref: a long pause under way does not keep the process alive; without it, it does', () => {
    // Real processes: only an empty event loop ends one. Each prints how long it lived.
    const module = pathToFileURL(path.join(REPO_ROOT, 'src/vocabulary/time/interruptible-sleep.ts')).href;
    const lifetime = (options: string, ms: number) => {
      const script = `import { InterruptibleSleep } from ${JSON.stringify(module)};
const started = Date.now();
process.on('exit', () => console.log(Date.now() - started));
void new InterruptibleSleep(${options}).sleep(${ms});`;
      const child = spawnSync(process.execPath, ['--import', 'tsx', '--input-type=module', '-e', script], {
        cwd: REPO_ROOT,
        encoding: 'utf8',
        timeout: 30_000,
      });
      expect(child.status).toBe(0);
      return Number(child.stdout.trim());
    };
    expect(lifetime('{ unref: true }', 60_000)).toBeLessThan(5_000);
    expect(lifetime('', 300)).toBeGreaterThanOrEqual(300);
  });
});
