import type { Logger } from 'pino';
import { errorFields, LifecycleError } from '../../vocabulary/errors.ts';
import type { Stores } from '../../storage/index.ts';
import { JobRow } from './job-row.ts';
import type { Database } from '../../database/connect.ts';
import { NotificationHub, WAKE_CHANNEL } from '../../database/notification-hub.ts';
import type { WakeTopic } from '../../storage/wake.ts';
import { Metrics } from '../observability/metrics.ts';
import type { Tracing } from '../observability/tracing.ts';
import { systemClock, type Clock } from '../../vocabulary/time/clock.ts';
import { DaemonSampler, DEFAULT_SAMPLE_INTERVAL_MS } from '../observability/daemon-samples.ts';
import { livenessLocksOf, type LivenessLocks } from '../../database/liveness-locks.ts';
import type { JobHolder } from '../../storage/index.ts';
import { deadHolders, type HolderVerdict } from './job-liveness.ts';

/** While pushes work, polls are this many times rarer, up to PUSHED_POLL_MAX_MS. */
const PUSHED_POLL_FACTOR = 20;
export const PUSHED_POLL_MAX_MS = 20_000;
/**
 * How the scheduler and the triggerer pace the passes wake-ups start (see PassPacer): each pass
 * reads every run under way or every owned trigger, and wake-ups come with every finished task
 * and every deferral (PostgreSQL NOTIFY, or standalone's components waking each other). Five
 * may run back to back, then one per 50 ms. bench:runtime on PostgreSQL with task runner
 * processes: 858 scheduler and 737 triggerer passes for 2,000 task runs unpaced, the run 10.0 s
 * and the process's CPU 7.7 s; paced (100 ms then), ~70 of each, 8.6 s and 5.6 s. The price: in
 * a steady stream of wake-ups a pass waits for its turn (bench:signals, a stream of two-task
 * chains: upstream end to downstream running 10 → 40 ms, 90 with a 100 ms gap).
 */
export const WOKEN_PASS_PACING = Object.freeze({ burst: 5, gapMs: 50 });

/** How long after a living holder's heartbeat would pass the threshold a daemon looks again (a heartbeat in flight lands meanwhile). */
const STALE_MARGIN_MS = 100;

/** /health calls a worker or a scheduler failing once its heartbeat is this many intervals old. */
export const HEALTH_HEARTBEAT_INTERVALS = 6;

export type DaemonState = 'new' | 'starting' | 'running' | 'stopping' | 'stopped';

export interface DaemonJob {
  /** What it is called in messages: triggerer, worker, scheduler. */
  readonly kind: string;
  /** job.job_type (TriggererJob, WorkerJob, SchedulerJob). */
  readonly jobType: string;
  readonly hostname: string;
  /** job.capacity: triggers or slots; null when the kind has none. */
  readonly capacity: number | null;
  /** job.queues: the queues it claims work from, as --queues takes them; null when the kind claims none. */
  readonly queues?: string | null;
  readonly heartbeatIntervalMs: number;
  /**
   * How stale its heartbeat may grow before /health calls this daemon failing: the triggerer's
   * health-check threshold (when peers take its triggers); six heartbeat intervals for the others.
   */
  readonly healthThresholdMs: number;
  /** How often it records its figures for the charts (readFigures); 0: never. @default 60 s */
  readonly sampleIntervalMs?: number;
}

/** What a daemon runs with besides its database and options: shared with the other components of its process. */
export interface DaemonRuntime {
  /** Where its metrics go (the process's, when it serves /metrics). @default a Metrics of its own */
  readonly metrics?: Metrics;
  /** The time its decisions read: heartbeats, liveness thresholds, deferral timeouts, schedules. @default the wall clock */
  readonly clock?: Clock;
  /** The stores it works through, shared by the process's daemons (each sees those its type names). @default opened on its database */
  readonly stores?: Stores;
  /** Where its spans go (the process's tracing); null or absent: tracing is off. @default off */
  readonly tracing?: Tracing | null;
}

/** What /health reads of a daemon. */
export interface DaemonHealth {
  readonly kind: string;
  readonly jobId: number | null;
  /** When its heartbeat (or its job row's registration) was last written; null before that. */
  readonly lastHeartbeatAt: number | null;
  readonly thresholdMs: number;
}

/**
 * The life every daemon (triggerer, worker, scheduler) shares:
 *
 *   new ──start()──▶ starting ──job row registered──▶ running ──stop()──▶ stopping ──▶ stopped
 *
 * - start() runs once: it registers the job row (heartbeated from then on), then calls run();
 *   a second start() throws DF_LIFECYCLE.
 * - stop() runs the shutdown once; every call returns the same promise. A stop() during the
 *   start waits for it, then shuts down; a stop() before start() (or after a start that failed)
 *   only marks the daemon stopped.
 * - The shutdown is the daemon's own (shutdown()), then the job row is ended (its heartbeat
 *   stops first, in shutdown, where the daemon needs it to).
 */
export abstract class Daemon<S extends Pick<Stores, 'jobs'> = Pick<Stores, 'jobs'>> {
  #state: DaemonState = 'new';
  #job: JobRow | null = null;
  #starting: Promise<void> | null = null;
  #stopped: Promise<void> | null = null;
  #lastHeartbeatAt: number | null = null;
  #sampler: DaemonSampler | null = null;
  /** Where this daemon's metrics go (the process's, when it serves /metrics). */
  readonly metrics: Metrics;
  /** The time its decisions read (see Clock). */
  protected readonly clock: Clock;
  /** The process's tracing; null when off (see src/services/observability/tracing.ts). */
  protected readonly tracing: Tracing | null;
  /** What this process holds for its life, and how it tells whether peers hold theirs. */
  protected readonly liveness: LivenessLocks;

  protected constructor(
    /** The database it runs on (its notifications and liveness locks are this handle's). */
    protected readonly database: Database,
    /** The stores this daemon uses (its subclass's type names them): its job row's, and its work's. */
    readonly storage: S,
    readonly log: Logger,
    private readonly description: DaemonJob,
    runtime: DaemonRuntime = {},
  ) {
    this.metrics = runtime.metrics ?? new Metrics();
    this.clock = runtime.clock ?? systemClock;
    this.tracing = runtime.tracing ?? null;
    this.liveness = livenessLocksOf(database, log);
    this.metrics.jobs().observe({ jobType: description.jobType, lastHeartbeatAt: () => (this.#state === 'running' ? this.#lastHeartbeatAt : null) });
  }

  /** Its heartbeat's freshness, for /health. */
  health(): DaemonHealth {
    return {
      kind: this.description.kind,
      jobId: this.jobId,
      lastHeartbeatAt: this.#state === 'running' ? this.#lastHeartbeatAt : null,
      thresholdMs: this.description.healthThresholdMs,
    };
  }

  /** This daemon's job id (its identity in the job table); null before it started. */
  get jobId(): number | null {
    return this.#job?.id ?? null;
  }

  /** True from the start until stop() is called: the daemon's loops run while it holds. */
  #stopWakeups: (() => void) | null = null;
  #stopWatch: (() => void) | null = null;

  /**
   * Another process let go of its liveness lock (it was killed, or lost the database): a daemon
   * that takes over from dead peers looks now (the triggerer, the scheduler) rather than at its
   * next poll.
   */
  protected onPeerGone(): void {}

  protected get isRunning(): boolean {
    return this.#state === 'running';
  }

  async start(): Promise<void> {
    if (this.#state !== 'new') throw new LifecycleError(this.description.kind, this.#state);
    this.#state = 'starting';
    this.#starting = (async () => {
      const { jobType, hostname, capacity, queues, heartbeatIntervalMs } = this.description;
      try {
        await this.beforeStart();
      } catch (error) {
        this.#state = 'stopped';
        throw error;
      }
      try {
        this.#job = await JobRow.register(
          this.storage,
          { jobType, hostname, pid: process.pid, capacity, queues },
          heartbeatIntervalMs,
          this.log,
          () => {
            // /health's own measure, against the wall clock on its thread, as is this.
            this.#lastHeartbeatAt = Date.now();
            this.onHeartbeat();
          },
          this.clock,
          this.liveness,
        );
        this.#lastHeartbeatAt = Date.now();
      } catch (error) {
        this.#state = 'stopped';
        await this.startAborted().catch(() => {});
        throw error;
      }
      this.#state = 'running';
      const sampleIntervalMs = this.description.sampleIntervalMs ?? DEFAULT_SAMPLE_INTERVAL_MS;
      if (this.readFigures && sampleIntervalMs > 0) {
        this.#sampler = new DaemonSampler(this.storage, { id: this.#job.id, jobType }, sampleIntervalMs, () => this.readFigures!(), this.log, this.clock);
        this.#sampler.start();
      }
      // Told within about a second when another process's job lets go of its liveness lock.
      this.#stopWatch = this.liveness.watch(
        () => this.storage.jobs.listRunningJobs(),
        () => this.onPeerGone(),
      );
      this.run(this.#job);
    })();
    return this.#starting;
  }

  stop(): Promise<void> {
    this.#stopped ??= this.#shutdown();
    return this.#stopped;
  }

  async #shutdown(): Promise<void> {
    await this.#starting?.catch(() => {});
    if (this.#state !== 'running') {
      this.#state = 'stopped';
      return;
    }
    this.#state = 'stopping';
    this.#stopWatch?.();
    this.#stopWatch = null;
    this.#stopWakeups?.();
    this.#stopWakeups = null;
    const job = this.#job!;
    await this.#sampler?.stop();
    await this.shutdown(job);
    try {
      await job.end('success', this.clock.now());
      this.log.info({ job_id: job.id }, `${this.description.kind} ${job.id} stopped`);
    } catch (error) {
      job.stopHeartbeat();
      this.log.error(
        { job_id: job.id, ...errorFields(error, 'DF_DATABASE') },
        `could not end ${this.description.kind} ${job.id}'s job row; it looks dead to peers once its heartbeat is stale`,
      );
    }
    this.#state = 'stopped';
  }

  /**
   * Calls the handler of a topic whenever a write elsewhere NOTIFYs work for it (PostgreSQL), and
   * every handler whenever the LISTEN session (re)connects or, on a SQLite file, another process
   * commits to it (no topic is said there: see NotificationHub). Standalone also wakes its
   * components in-process. Call it from run(); it ends when the daemon stops.
   */
  protected subscribeWakeups(database: Database, handlers: Partial<Record<WakeTopic, () => void>>, push = true): void {
    this.#stopWakeups?.();
    this.#stopWakeups = null;
    const hub = NotificationHub.of(database, this.log);
    // --no-push: this handle never LISTENs (signal listeners on it poll too).
    if (!push) {
      hub.disable();
      return;
    }
    this.#stopWakeups = hub.subscribe(
      WAKE_CHANNEL,
      (payload) => (Object.hasOwn(handlers, payload) ? handlers[payload as WakeTopic]?.() : undefined),
      () => {
        for (const handler of Object.values(handlers)) handler();
      },
    );
  }

  /**
   * Which of `holders` are dead, and when to look again for the next living one to pass the
   * threshold (see deadHolders; a short margin after it): the threshold counts from this daemon's
   * clock, and its own job is never among them.
   */
  protected async deadAmong(holders: readonly JobHolder[], thresholdMs: number): Promise<HolderVerdict> {
    const now = this.clock.now();
    // A peer's stale heartbeat says it was silent only if this process could hear it meanwhile:
    // after a database outage (its own heartbeats failed too, say SQLite's write lock held by
    // another process) every peer's heartbeat is as old, and none is judged by it until the
    // database has answered this process's heartbeats for a whole threshold. Locks and job rows
    // still tell at once.
    const failedAt = this.#job?.lastFailedBeatAt ?? null;
    const aliveSince = failedAt !== null && now - failedAt < thresholdMs ? Number.NEGATIVE_INFINITY : now - thresholdMs;
    const verdict = await deadHolders(holders, aliveSince, thresholdMs, this.liveness, this.jobId);
    return { dead: verdict.dead, nextStaleAt: verdict.nextStaleAt === null ? null : verdict.nextStaleAt + STALE_MARGIN_MS };
  }

  /** Whether pushed wake-ups are known to arrive (the polls in between can be slower). */
  protected wakeupsPushed(database: Database): boolean {
    return this.#stopWakeups !== null && NotificationHub.of(database, this.log).pushWorks;
  }

  /**
   * The pause between two polls: `pollMs` while work is found only by polling; while pushes are
   * known to arrive, the poll is a safety net and waits ten times longer, at most 10 s (at least
   * the poll itself), so an idle daemon asks the database about once in that time.
   */
  protected safetyNetPause(database: Database, pollMs: number): number {
    return this.wakeupsPushed(database) ? Math.max(pollMs, Math.min(pollMs * PUSHED_POLL_FACTOR, PUSHED_POLL_MAX_MS)) : pollMs;
  }

  /**
   * What must work before the daemon counts as started (binding a port): a throw fails start()
   * before any job row is written. startAborted() undoes it if registering the job row fails.
   */
  protected async beforeStart(): Promise<void> {}

  protected async startAborted(): Promise<void> {}

  /** Starts the daemon's loops (not awaited): the job row is registered and heartbeating. */
  protected abstract run(job: JobRow): void;

  /** Winds the daemon down (its loops end once isRunning is false); the job row is ended after. */
  protected abstract shutdown(job: JobRow): Promise<void>;

  /** Called after each heartbeat written. */
  protected onHeartbeat(): void {}

  /** Its figures for the charts (see DaemonSampler); a daemon without any records none. */
  protected readFigures?(): Promise<Record<string, number>> | Record<string, number>;
}
