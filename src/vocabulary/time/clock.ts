/**
 * The time a daemon's decisions read: the moment its heartbeat records, the age past which a
 * peer is dead, the deadline past which a deferral times out, the moment a schedule is due.
 * Timers still run on real time (a wait is a wait); a test that must be past a threshold gives
 * the daemons a clock ahead of the wall clock instead of waiting for it.
 */
export interface Clock {
  /** Milliseconds since the epoch, as Date.now(). */
  now(): number;
}

/** The wall clock. */
export const systemClock: Clock = Object.freeze({ now: () => Date.now() });
