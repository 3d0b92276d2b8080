import type { Clock } from '../../src/vocabulary/time/clock.ts';

/**
 * A clock a set distance ahead of the wall clock, for a daemon whose test must be past a
 * threshold (a peer's heartbeat gone stale, a deferral timed out) without waiting for it: give
 * the daemon this clock and `advance()` it.
 */
export class SteppedClock implements Clock {
  #aheadMs = 0;

  now(): number {
    return Date.now() + this.#aheadMs;
  }

  /** Moves this clock `ms` further ahead of the wall clock. */
  advance(ms: number): void {
    this.#aheadMs += ms;
  }
}
