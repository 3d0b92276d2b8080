import { describe, expect, it } from 'vitest';
import { progressLine, summaryLine } from '../../src/app/standalone/progress-line.ts';

const run = { dagId: 'demo', runId: 'manual__1', state: 'success' };
const allDone = (n: number) => ({ state: 'success' as const, counts: { success: n } });

describe('the standalone progress line', () => {
  it('counts a run by group, failures apart', () => {
    const line = progressLine({ total: 200, waiting: 0, running: 4, deferred: 150, done: 46, failed: 2 }, 6_240);
    expect(line).toBe('[#####...............] done 46/200 (2 failed) · deferred 150 · running 4 · waiting 0 · 6.2 s');
  });
});

describe('the closing summary', () => {
  it('says how long holding slots through the waits would have taken when the waits made it longer', () => {
    // The demo: 200 tasks waiting 10 s each on 4 slots.
    expect(summaryLine(run, allDone(200), 2_001_000, 10_500, 4, 1_600)).toBe(
      'demo manual__1: success in 10.5 s. 200 tasks took 2001 s in all, waits included, of which they held worker slots for 1.6 s; ' +
        'holding a slot while waiting, 4 slots would have needed at least 500 s.',
    );
  });

  it('leaves the comparison out when the waits were too short for it to mean anything, and keeps short times readable', () => {
    // deferflow init's example: 2 tasks, 16 slots, a 1 s wait.
    expect(summaryLine(run, allDone(2), 2_300, 2_400, 16, 800)).toBe(
      'demo manual__1: success in 2.4 s. 2 tasks took 2.3 s in all, waits included, of which they held worker slots for 0.8 s.',
    );
  });

  it("does not call slot time a part of the tasks' time when it is longer", () => {
    // A run whose task failed at once: 0.6 s of task time, 2.9 s of slot time.
    expect(summaryLine({ ...run, state: 'failed' }, allDone(1), 600, 3_000, 16, 2_900)).toBe(
      'demo manual__1: failed in 3.0 s. 1 task took 0.6 s in all, waits included; worker slots were held for 2.9 s (claims, retries and writes included).',
    );
  });
});
