import type { Logger } from 'pino';
import { errorFields } from '../../vocabulary/errors.ts';
import type { JobFields, Stores } from '../../storage/index.ts';
import { systemClock, type Clock } from '../../vocabulary/time/clock.ts';
import type { LivenessLocks } from '../../database/liveness-locks.ts';

/**
 * A long-running process's row in `job` (triggerer, worker, scheduler): registered when it
 * starts, heartbeated while it runs (peers judge it dead when the heartbeat goes stale), ended
 * when it stops. A failed heartbeat is logged and the next one tried: one database hiccup does
 * not make a process look dead.
 *
 * Where heartbeats come from, and why: a timer on the daemon's own event loop, every
 * heartbeat-interval (5 s), judged against a threshold of 10 s. A heartbeat says the daemon
 * works, not only that its process exists (its liveness lock says that, at once): so it comes
 * from the loop that does the work, and a loop that stops turning (SIGSTOP, a frozen VM) stops
 * it. What could delay a live loop's heartbeat is far below the 5 s margin: CPU hogs delay a
 * timer by a scheduler's time slice, a stop-the-world collection by its pause (500 ms is long),
 * and a step holding the loop is cut by the watchdog at 10 s (the triggerer's; and then the
 * process is restarted, its lock freed). A database that answers nobody (an outage, SQLite's
 * write lock held elsewhere) delays every heartbeat alike: peers whose own heartbeat failed meanwhile
 * judge nobody by heartbeat until the database has answered them for a whole threshold (see
 * Daemon.deadAmong). A thread of its own would keep heartbeating for a loop that no longer
 * turns, and cost a connection; the loop's timer costs one statement per interval, which the
 * idle budget (0.5 statements a second per daemon) allows at 5 s, not at 2.
 */
export class JobRow {
  #timer: NodeJS.Timeout | null;
  #beatFailedAt: number | null = null;

  /** When its last heartbeat failed (clock ms), if one ever did: since then this process could not tell a silent peer from a silent database. */
  get lastFailedBeatAt(): number | null {
    return this.#beatFailedAt;
  }

  private constructor(
    readonly id: number,
    private readonly storage: Pick<Stores, 'jobs'>,
    heartbeatIntervalMs: number,
    private readonly log: Logger,
    /** Called after each successful heartbeat. */
    onBeat: () => void,
    clock: Clock,
    private readonly liveness: LivenessLocks | null,
  ) {
    this.#timer = setInterval(() => {
      this.storage.jobs.heartbeatJob(this.id, clock.now()).then(onBeat, (error: unknown) => {
        this.#beatFailedAt = clock.now();
        this.log.error({ job_id: this.id, ...errorFields(error, 'DF_DATABASE') }, 'heartbeat failed');
      });
    }, heartbeatIntervalMs);
  }

  static async register(
    storage: Pick<Stores, 'jobs'>,
    fields: JobFields,
    heartbeatIntervalMs: number,
    log: Logger,
    onBeat: () => void = () => {},
    clock: Clock = systemClock,
    liveness: LivenessLocks | null = null,
  ): Promise<JobRow> {
    const id = await storage.jobs.registerJob(fields, clock.now());
    // The lock is taken once the row exists (its key is the job id) and recorded after: until
    // then peers judge the job by its heartbeat, which is fresh.
    const lock = await liveness?.hold(id).catch((error: unknown) => {
      log.warn(
        { job_id: id, ...errorFields(error, 'DF_DATABASE') },
        'could not take a liveness lock: peers will tell this process is gone only by its heartbeat',
      );
      return null;
    });
    if (lock) await storage.jobs.setLivenessLock(id, lock);
    return new JobRow(id, storage, heartbeatIntervalMs, log, onBeat, clock, liveness);
  }

  /** No more heartbeats (the process is stopping); the row stays running until end(). */
  stopHeartbeat(): void {
    if (this.#timer) clearInterval(this.#timer);
    this.#timer = null;
  }

  async end(state: 'success' | 'failed' = 'success', now = Date.now()): Promise<void> {
    this.stopHeartbeat();
    await this.storage.jobs.endJob(this.id, state, now);
    await this.liveness?.release(this.id);
  }
}
