// How the scheduler and the triggerer pace the passes wake-ups start: a burst back to back,
// then one per gap however often they are woken, and the burst is earned back while passes are
// rarer than that.
import { describe, expect, it } from 'vitest';
import { PassPacer } from '../../src/vocabulary/time/pass-pacer.ts';

/** Passes of `durationMs` each, started as soon as the pacer lets them (woken at once every time): their start times. */
function starts(pacer: PassPacer, durationMs: number, count: number, from = 0): number[] {
  const at: number[] = [];
  let now = from;
  while (at.length < count) {
    now += pacer.floorMs(now);
    at.push(now);
    pacer.passStarted(now);
    now += durationMs;
  }
  return at;
}

describe('PassPacer', () => {
  it('lets a burst run back to back, then one pass per gap', () => {
    expect(starts(new PassPacer({ burst: 3, gapMs: 50 }), 2, 6)).toEqual([0, 2, 4, 50, 100, 150]);
    // Passes longer than the gap are never held back.
    expect(starts(new PassPacer({ burst: 1, gapMs: 50 }), 80, 3)).toEqual([0, 80, 160]);
  });

  it('earns the burst back while passes are rarer than one per gap', () => {
    const pacer = new PassPacer({ burst: 3, gapMs: 50 });
    starts(pacer, 5, 3);
    expect(pacer.floorMs(15)).toBe(35); // the fourth at 50, one gap after the first
    // A quiet second later: three back to back again.
    expect(starts(pacer, 5, 4, 1000)).toEqual([1000, 1005, 1010, 1050]);
    // Passes one gap apart never wait.
    const steady = new PassPacer({ burst: 1, gapMs: 50 });
    for (let at = 0; at < 1000; at += 50) {
      expect(steady.floorMs(at)).toBe(0);
      steady.passStarted(at);
    }
  });
});
