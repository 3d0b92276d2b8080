// A task instance's time by state, from its history: spans between changes, the last until now
// unless finished, and the worker-slot time against the time waited without a slot.
import { describe, expect, it } from 'vitest';
import { slotTime, stateSpans } from '../../src/model/state-timeline.ts';

const change = (state: Parameters<typeof stateSpans>[0][number]['state'], at: number, tryNumber = 1, triggerId: number | null = null) => ({
  state,
  at,
  tryNumber,
  triggerId,
});

describe('state timeline', () => {
  it('spans each state until the next change; a finished one ends there, an unfinished one runs until now', () => {
    const finished = stateSpans(
      [
        change('scheduled', 0, 0),
        change('queued', 10, 0),
        change('running', 12),
        change('deferred', 50, 1, 7),
        change('scheduled', 1050),
        change('queued', 1060),
        change('running', 1061),
        change('success', 1100),
      ],
      5000,
    );
    expect(finished.map((span) => [span.state, span.from, span.to])).toEqual([
      ['scheduled', 0, 10],
      ['queued', 10, 12],
      ['running', 12, 50],
      ['deferred', 50, 1050],
      ['scheduled', 1050, 1060],
      ['queued', 1060, 1061],
      ['running', 1061, 1100],
    ]);
    expect(finished[3]).toMatchObject({ triggerId: 7, tryNumber: 1 });
    expect(slotTime(finished)).toEqual({ holdingMs: 2 + 38 + 1 + 39, waitingMs: 1000 });
    const waiting = stateSpans([change('running', 0), change('deferred', 100)], 600);
    expect(waiting.at(-1)).toMatchObject({ state: 'deferred', from: 100, to: 600 });
    expect(slotTime(waiting)).toEqual({ holdingMs: 100, waitingMs: 500 });
    expect(stateSpans([], 10)).toEqual([]);
  });
});
