import type { Logger } from 'pino';
import { DEFAULT_QUEUES, queueListText, type QueueSet } from '../../model/queues.ts';
import type { Database } from '../../database/connect.ts';
import { WORKER_JOB_TYPE } from '../../database/schema.ts';
import {
  codeOf,
  describeThrown,
  errorFields,
  WorkerStoppingError,
  TaskExecutionTimeoutError,
  TaskInstanceStateError,
  TaskStoppedBySignalError,
  TryTakenOverError,
} from '../../vocabulary/errors.ts';
import type { BaseOperator, TaskContext } from '../../authoring/operators/base-operator.ts';
import { WakeSet } from '../../vocabulary/time/wake-set.ts';
import { InterruptibleSleep } from '../../vocabulary/time/interruptible-sleep.ts';
import { type ClaimedTaskInstance, type HeldTry, type StartedTaskInstance, type TaskOutcome, openStores, type Stores } from '../../storage/index.ts';
import { retryDelayMs, type RetryPolicy } from '../../model/retry-policy.ts';
import { TaskLogWriter, type TryLoggers } from './task-log-writer.ts';
import { InlineTaskRunner } from './inline-task-runner.ts';
import type { PreparedTask, TaskResult, TaskRunner } from './task-runner.ts';
import { Daemon, HEALTH_HEARTBEAT_INTERVALS, type DaemonRuntime } from '../../services/jobs/daemon.ts';
import type { Clock } from '../../vocabulary/time/clock.ts';
import type { JobRow } from '../../services/jobs/job-row.ts';
import { taskLabel } from './claimed-task.ts';
import type { TrySpan } from '../../services/observability/tracing.ts';
import { TASK_END_STATES, type TaskEndState } from '../../authoring/triggers/trigger-event.ts';

/** What the worker needs to run one task: its operator, and how failures and time are handled. */
export interface ResolvedTask<Context extends TaskContext = TaskContext> {
  readonly operator: BaseOperator<Context>;
  readonly retry: RetryPolicy;
  /** The whole task's time budget, deferrals included; null for none. */
  readonly executionTimeoutMs: number | null;
  /** The context execute() and resumed methods receive; `taskLog` is the logger whose lines make up this try's task log. */
  context(taskInstance: ClaimedTaskInstance, started: StartedTaskInstance, taskLog: Logger, signal: AbortSignal): Context | Promise<Context>;
}

/** A resolved task whatever context its operator takes (see AnyOperator). */
// biome-ignore lint/suspicious/noExplicitAny: "whatever context", as AnyOperator
export type AnyResolvedTask = ResolvedTask<any>;

/** Finds the task a claimed task instance runs (by importing its DAG file). Throws, naming the task, when it cannot. */
export type TaskResolver = (taskInstance: ClaimedTaskInstance) => Promise<AnyResolvedTask>;

/** The worker's options: slots, intervals, thresholds, task isolation and how tasks are found. */
export interface WorkerOptions {
  /** Task instances run at once (slots). */
  readonly concurrency: number;
  /** Pause between claims when there is nothing to claim or no free slot. */
  readonly pollIntervalMs: number;
  /** How often it heartbeats its job row, in ms. */
  readonly heartbeatIntervalMs: number;
  /** How long a stop waits for running tasks before handing them back for a retry. */
  readonly shutdownGraceMs: number;
  /** The host its job row names. */
  readonly hostname: string;
  /** Wake on pushed work (PostgreSQL LISTEN/NOTIFY) as well as every poll. @default true */
  readonly push?: boolean;
  /** The queues whose task instances it claims (see src/model/queues.ts). @default `default` only */
  readonly queues?: QueueSet;
  /** How often it records its figures for the status page's charts, in ms; 0: never. @default 60 s */
  readonly sampleIntervalMs?: number;
}

/** The stores a worker uses: its job row, the task instances it runs, DAG run states and signals (tasks' context), task logs. */
export type WorkerStores = Pick<Stores, 'jobs' | 'taskInstances' | 'dagRuns' | 'signals' | 'logs' | 'inputs'>;

/**
 * The worker daemon: claims scheduled task instances into its slots, runs and resumes them.
 *
 * A worker's life is every daemon's (src/services/jobs/daemon.ts: start once, stop once, a job row).
 * While running it claims scheduled task instances into free slots and runs each: start it
 * (queued → running), execute() it or resume it at next_method, and record the outcome (see
 * src/storage/task-instance-state-machine.ts). A TaskDeferred is recorded with the core's
 * deferTaskInstance and frees the slot at once. Its job row is heartbeated; a worker whose
 * heartbeat goes stale has its task instances retried by the scheduler.
 *
 * stop(): claim nothing more, give running tasks `shutdownGraceMs` to finish, hand the others
 * back (scheduled, their try given back: run again, not lost, no retry spent), end the job row.
 */
export class Worker extends Daemon<WorkerStores> {
  readonly #running = new Map<number, Promise<void>>();
  /** The tries whose code runs now, by task instance (see RunningTry). */
  readonly #runningTries = new Map<number, RunningTry>();
  /** A look at the running tries (stop requests, tries taken over) is under way, and another is wanted after it (`again`). */
  #stopCheck: { again: boolean } | null = null;
  #loop: Promise<void> | null = null;
  readonly #pause = new InterruptibleSleep();
  /** Writes waiting out their backoff (see #recordPersistently): a successful heartbeat ends their wait. */
  readonly #retryWaits = new WakeSet();
  #slotMs = 0;
  /** Root spans being emitted (see #traceTaskInstanceEnd). */
  readonly #rootSpans = new Set<Promise<void>>();
  readonly #taskLogs: TaskLogWriter;
  readonly #runner: TaskRunner;
  /**
   * Called after this worker recorded a deferral or an outcome: others (a triggerer, a
   * scheduler) may have work now. Standalone wires it to their wake().
   */
  onWork: (() => void) | null = null;

  constructor(
    database: Database,
    /** Its options, resolved. */
    readonly options: WorkerOptions,
    /** Where task code runs: a TaskResolver's tasks run on this worker's loop (InlineTaskRunner). */
    runner: TaskResolver | TaskRunner,
    log: Logger,
    /** Metrics and clock shared with the other components of its process. */
    runtime: DaemonRuntime = {},
  ) {
    super(
      database,
      runtime.stores ?? openStores(database),
      log,
      {
        kind: 'worker',
        jobType: WORKER_JOB_TYPE,
        hostname: options.hostname,
        capacity: options.concurrency,
        queues: queueListText(options.queues ?? DEFAULT_QUEUES),
        heartbeatIntervalMs: options.heartbeatIntervalMs,
        healthThresholdMs: HEALTH_HEARTBEAT_INTERVALS * options.heartbeatIntervalMs,
        sampleIntervalMs: options.sampleIntervalMs,
      },
      runtime,
    );
    this.#taskLogs = new TaskLogWriter(this.storage, log);
    this.#runner = typeof runner === 'function' ? new InlineTaskRunner(runner) : runner;
    this.metrics.worker().observe({ running: () => this.#running.size, slots: options.concurrency });
  }

  /** Task instances running in this worker's slots now. */
  get runningCount(): number {
    return this.#running.size;
  }

  /** Slot time spent so far: for each task instance run, from its claim to its outcome recorded. */
  get slotMsSpent(): number {
    return this.#slotMs;
  }

  /**
   * Starts what the first task will need (a task runner process, which takes a third of a second)
   * while the rest of the process starts, instead of once the worker runs; stop() ends it even if
   * the worker never ran.
   */
  prewarm(): void {
    this.#runner.start?.();
  }

  /** Stops the worker (see Daemon.stop), then closes its runner processes. */
  override async stop(): Promise<void> {
    await super.stop();
    // Runners prewarmed for a worker that never ran (its start failed); closing twice is harmless.
    await this.#runner.close();
  }

  /** Looks for scheduled task instances now instead of at the next poll (standalone calls it when its scheduler or triggerer made work). */
  wake(): void {
    this.#pause.wake();
  }

  /**
   * Looks for signals stopping running tries now instead of at the next heartbeat (standalone
   * calls it when its scheduler acted on signals; the triggerer's events never stop a try, and
   * looking at each of them was a query per finished trigger while tasks ran).
   */
  lookForStopRequests(): void {
    this.#checkRunningTries();
  }

  /** The charts' figures: slots in use, and slots. */
  protected override readFigures(): Record<string, number> {
    return { slots_used: this.#running.size, slots: this.options.concurrency };
  }

  /** After each heartbeat: looks for stop requests and tries taken over, and retries now the writes waiting out a backoff. */
  protected override onHeartbeat(): void {
    // The safety net for a stop request whose push was lost (or with pushes off), and where a
    // worker back from a pause or a cut past the zombie threshold learns its tries were taken over.
    this.#checkRunningTries();
    // The database answers again: writes waiting out their backoff go now.
    this.#retryWaits.wakeAll();
  }

  /**
   * Aborts the tries a signal asked to stop or restart (see src/storage/stop-requests.ts): their
   * code sees context.signal aborted with DF_TASK_STOPPED_BY_SIGNAL, and #runStarted carries the
   * request out. Aborts those no longer this worker's too (DF_TRY_TAKEN_OVER): nothing more of
   * them is written. One look at a time; a wake during one asks for another after it.
   */
  #checkRunningTries(): void {
    if (this.#runningTries.size === 0 || this.jobId === null) return;
    if (this.#stopCheck) {
      this.#stopCheck.again = true;
      return;
    }
    const check = { again: false };
    this.#stopCheck = check;
    void (async () => {
      try {
        do {
          check.again = false;
          const running = [...this.#runningTries].filter(([, entry]) => !entry.settled);
          const news = await this.storage.taskInstances.checkHeldTries(new Map(running.map(([taskInstanceId, entry]) => [taskInstanceId, entry.held])));
          for (const [taskInstanceId, found] of news) {
            const entry = this.#runningTries.get(taskInstanceId);
            // Gone, settled or replaced by a newer try (of this worker) since the read began.
            if (!entry || entry.settled || entry.controller.signal.aborted || !running.some(([, ran]) => ran === entry)) continue;
            entry.controller.abort(
              found.kind === 'stop-requested'
                ? new TaskStoppedBySignalError(found.request)
                : new TryTakenOverError(entry.label, entry.held.tryNumber, found.now),
            );
          }
        } while (check.again && this.#runningTries.size > 0);
      } catch (error) {
        this.log.warn(
          errorFields(error, 'DF_DATABASE'),
          'looking at the running tries (signals stopping them, tries taken over) failed; looking again at the next heartbeat',
        );
      } finally {
        this.#stopCheck = null;
      }
    })();
  }

  /** Starts its loop once its job row is registered (Daemon.start calls it). */
  protected run(job: JobRow): void {
    this.log.info({ job_id: job.id, concurrency: this.options.concurrency }, `worker ${job.id} started with ${this.options.concurrency} slot(s)`);
    this.subscribeWakeups(this.database, { worker: () => this.#pause.wake(), 'stop-request': () => this.#checkRunningTries() }, this.options.push ?? true);
    this.#runner.start?.();
    this.#loop = this.#claimLoop();
  }

  /** Stops claiming, gives running tasks the shutdown grace, then hands the others back (Daemon.stop calls it, once). */
  protected async shutdown(job: JobRow): Promise<void> {
    this.#pause.wake();
    await this.#loop;
    if (this.#running.size > 0 && this.options.shutdownGraceMs > 0) {
      this.log.info(
        { running: this.#running.size, grace_ms: this.options.shutdownGraceMs },
        `stopping: waiting up to ${this.options.shutdownGraceMs / 1000} s for ${this.#running.size} running task(s) to finish; then they are handed back`,
      );
      const graceEnds = new Promise<void>((resolve) => setTimeout(resolve, this.options.shutdownGraceMs).unref());
      await Promise.race([Promise.allSettled(this.#running.values()), graceEnds]);
    }
    const jobId = job.id;
    for (const taskInstanceId of this.#running.keys()) {
      // Its code may still be running in this process, but the process is going: hand it back,
      // then ask the code to stop (its own outcome, should it come, is dropped: no longer ours).
      const handedBack = await this.storage.taskInstances.handBackTaskInstance(taskInstanceId, jobId, this.clock.now());
      if (handedBack) {
        this.log.warn(
          { task_instance_id: taskInstanceId },
          `task instance ${taskInstanceId} did not finish before shutdown; handed back with its try, it runs again on the next worker`,
        );
      }
      this.#runningTries.get(taskInstanceId)?.controller.abort(new WorkerStoppingError());
    }
    // Code that heeds its signal winds down now; give it a moment before the logs close.
    await Promise.race([Promise.allSettled(this.#running.values()), new Promise((resolve) => setTimeout(resolve, 200).unref())]);
    await this.#runner.close();
    await this.#taskLogs.close();
    await Promise.all(this.#rootSpans);
  }

  async #claimLoop(): Promise<void> {
    const worker = { jobId: this.jobId!, hostname: this.options.hostname, pid: process.pid };
    // A failed claim may have committed (its answer lost with the connection): what it queued
    // for this worker is taken up before the next claim, or it would wait, queued, for ever.
    let claimFailed = false;
    while (this.isRunning) {
      const free = this.options.concurrency - this.#running.size;
      let claimed: ClaimedTaskInstance[] = [];
      if (free > 0) {
        try {
          if (claimFailed) {
            claimed = await this.storage.taskInstances.claimedButNotHeld(worker.jobId, [...this.#running.keys()]);
            if (claimed.length > 0)
              this.log.warn(
                { task_instance_ids: claimed.map((taskInstance) => taskInstance.id) },
                `taking up ${claimed.length} task instance(s) a claim whose answer was lost queued for this worker`,
              );
            claimFailed = false;
          }
          // A worker that holds no try until this claim tells the schedulers it now does: a
          // scheduler watches the heartbeats only of workers it saw holding tries at its last
          // pass, and an idle one's next pass may be a safety net (20 s) away; one this worker
          // froze right after the claim would then be found that late instead of at the zombie
          // threshold. One wake-up per busy spell, not one per claim.
          const wakeScheduler = this.#running.size === 0 && claimed.length === 0;
          if (claimed.length < free)
            claimed.push(
              ...(await this.storage.taskInstances.claimTaskInstances(worker, free - claimed.length, this.clock.now(), {
                wakeScheduler,
                queues: this.options.queues,
              })),
            );
        } catch (error) {
          claimFailed = true;
          this.log.error(errorFields(error, 'DF_DATABASE'), 'claiming task instances failed; retrying');
        }
      }
      for (const taskInstance of claimed) {
        const claimedAt = performance.now();
        const operator = taskInstance.operator ?? 'unknown';
        const run = this.#run(taskInstance)
          // The database refused the outcome even after retries: the task instance stays running
          // on this worker until the worker stops or dies; then the scheduler retries it.
          .catch((error: unknown) =>
            this.log.error(
              { task_instance_id: taskInstance.id, ...errorFields(error, 'DF_DATABASE') },
              `recording task instance ${taskInstance.id} failed; it is retried once this worker stops`,
            ),
          )
          .finally(() => {
            const ranMs = performance.now() - claimedAt;
            this.#slotMs += ranMs;
            this.metrics.worker().duration.observe({ operator }, ranMs / 1000);
            // A restarted task instance may be claimed again before this run wound down: the
            // entry is then the next run's.
            if (this.#running.get(taskInstance.id) === run) this.#running.delete(taskInstance.id);
            this.#pause.wake();
            this.onWork?.();
          });
        this.#running.set(taskInstance.id, run);
      }
      // Claim again at once while there is work and room; else wait for a slot or the poll.
      if (claimed.length > 0 && claimed.length === free) continue;
      await this.#pause.sleep(this.safetyNetPause(this.database, this.options.pollIntervalMs));
    }
  }

  async #run(taskInstance: ClaimedTaskInstance): Promise<void> {
    const jobId = this.jobId!;
    const label = taskLabel(taskInstance);
    let task: PreparedTask;
    try {
      task = await this.#runner.prepare(taskInstance);
    } catch (error) {
      // No code to run: the try is spent like any failure, without retries (they would fail alike).
      const started = await this.#recordPersistently(taskInstance.id, 'its start', () =>
        this.storage.taskInstances.startTaskInstance(taskInstance.id, jobId, null, this.clock.now()),
      );
      if (!started) return;
      const trace = this.#startTrySpan(taskInstance, started.tryNumber, started.nextMethod);
      try {
        await this.#finish(
          taskInstance,
          { workerJobId: jobId, tryNumber: started.tryNumber },
          label,
          this.#openTaskLog(taskInstance, started),
          { state: 'failed' },
          { error, trace },
        );
      } finally {
        trace?.end();
        this.#taskLogs.release(taskInstance.id, started.tryNumber);
      }
      return;
    }
    // Like an outcome, a start is kept through an outage: a claimed task instance that could not
    // be started would otherwise stay queued on this (live) worker until it stops.
    const started = await this.#recordPersistently(taskInstance.id, 'its start', () =>
      this.storage.taskInstances.startTaskInstance(taskInstance.id, jobId, task.executionTimeoutMs, this.clock.now()),
    );
    if (!started) return; // cleared or reaped meanwhile
    // What this try writes lands only while the try is still this worker's (see HeldTry).
    const trace = this.#startTrySpan(taskInstance, started.tryNumber, started.nextMethod);
    const entry: RunningTry = { controller: new AbortController(), held: { workerJobId: jobId, tryNumber: started.tryNumber }, label, settled: false, trace };
    this.#runningTries.set(taskInstance.id, entry);
    try {
      await this.#runStarted(taskInstance, label, task, started, entry);
    } finally {
      trace?.end();
      this.#taskLogs.release(taskInstance.id, started.tryNumber);
      // Not the next try's (a restart may have started it here already).
      if (this.#runningTries.get(taskInstance.id) === entry) this.#runningTries.delete(taskInstance.id);
    }
  }

  async #runStarted(taskInstance: ClaimedTaskInstance, label: string, task: PreparedTask, started: StartedTaskInstance, running: RunningTry): Promise<void> {
    const { controller: cancel, held } = running;
    const tryLog = this.#openTaskLog(taskInstance, started);
    tryLog.worker.info(
      started.nextMethod ? { next_method: started.nextMethod } : {},
      `running ${label}, try ${started.tryNumber}${started.nextMethod ? `, resuming at ${started.nextMethod}` : ''}`,
    );
    let result: TaskResult;
    if (started.unreadableKwargs) {
      // Encrypted with a key this worker lacks: nothing runs, and no retry could read them either.
      result = { kind: 'failed', error: started.unreadableKwargs, retryable: false };
    } else {
      try {
        // Out of time already (its deferral timed out at the deadline): nothing more may run.
        if (started.executionDeadline !== null && this.clock.now() >= started.executionDeadline) {
          throw new TaskExecutionTimeoutError(label, started.executionDeadline);
        }
        result = await untilAborted(task.run(label, taskInstance, started, tryLog, cancel.signal), started.executionDeadline, this.clock, label, cancel);
        running.settled = true;
      } catch (aborted) {
        running.settled = true;
        // Its code was asked to stop: once it has, what it logged on the way out is in the log.
        await task.stopped();
        // The try was retried (or cleared) while this worker was away: nothing of it is written.
        if (aborted instanceof TryTakenOverError) {
          tryLog.worker.warn({ code: aborted.code }, aborted.message);
          await this.#taskLogs.flush();
          return;
        }
        if (aborted instanceof TaskStoppedBySignalError) {
          running.trace?.outcome('stopped by a signal');
          await this.#carryOutStopRequest(taskInstance, held, label, tryLog);
          return;
        }
        // Handed back at shutdown already (see shutdown()): nothing of this try is recorded.
        if (aborted instanceof WorkerStoppingError) return;
        // The execution timeout: a failure like any other, retried if the task may be.
        result = { kind: 'failed', error: aborted, retryable: true };
      }
    }
    if (result.kind === 'returned') {
      const { returnValueJson, followTaskIds } = result;
      await this.#finish(
        taskInstance,
        held,
        label,
        tryLog,
        { state: 'success', returnValueJson, ...(followTaskIds ? { followTaskIds } : {}) },
        { trace: running.trace },
      );
      return;
    }
    if (result.kind === 'deferred') {
      const deferral = result.deferral;
      // The moment it deferred stays the start of its timeout however long the write waits.
      const deferredAt = this.clock.now();
      const wait = await this.#recordWait(taskInstance, held, label, tryLog, 'its deferral', "deferred, but it is no longer this worker's to defer", () =>
        this.storage.taskInstances.deferTaskInstance(taskInstance.id, { ...deferral, queue: taskInstance.queue }, deferredAt, held),
      );
      if (wait.kind === 'written') {
        this.#countOutcome(taskInstance, 'deferred');
        running.trace?.deferred({
          id: wait.value.triggerId,
          classpath: deferral.serializedTrigger.classpath,
          method: deferral.method,
          timeoutMs: deferral.timeoutMs,
        });
        running.trace?.outcome('deferred');
        // No flush: the deferral's line rides the next timed write (the task is not finished).
        tryLog.worker.info({ next_method: deferral.method }, `${label} deferred; resumes at ${deferral.method}`);
        return;
      }
      if (wait.kind === 'dropped') return;
      result = { kind: 'failed', error: wait.error, retryable: true };
    }
    if (result.kind === 'awaiting_input') {
      const resume = { method: result.method, kwargs: result.kwargs };
      const wait = await this.#recordWait(
        taskInstance,
        held,
        label,
        tryLog,
        'its wait for input',
        "asked for input, but it is no longer this worker's to wait",
        () => this.storage.inputs.awaitInput(taskInstance.id, held, resume, this.clock.now()),
      );
      if (wait.kind === 'written') {
        const waits = wait.value;
        this.#countOutcome(taskInstance, waits === 'awaiting' ? 'awaiting_input' : 'scheduled');
        running.trace?.outcome(waits === 'awaiting' ? 'awaiting_input' : 'scheduled');
        tryLog.worker.info(
          { next_method: resume.method },
          waits === 'awaiting'
            ? `${label} awaits input; resumes at ${resume.method} with the response`
            : `${label} was answered before it began to wait; resumes at ${resume.method} at once`,
        );
        return;
      }
      if (wait.kind === 'dropped') return;
      result = { kind: 'failed', error: wait.error, retryable: true };
    }
    if (result.kind === 'skipped') {
      await this.#finish(taskInstance, held, label, tryLog, { state: 'skipped' }, { why: result.reason, trace: running.trace });
      return;
    }
    if (result.kind === 'rescheduled') {
      await this.#finish(
        taskInstance,
        held,
        label,
        tryLog,
        { state: 'up_for_reschedule', readyAt: result.readyAt, startedAt: started.startedAt },
        { why: `runs again at ${new Date(result.readyAt).toISOString()}`, trace: running.trace },
      );
      return;
    }
    const now = this.clock.now();
    const mayRetry = started.tryNumber <= task.retry.retries && result.retryable;
    const outcome: TaskOutcome = mayRetry ? { state: 'up_for_retry', readyAt: now + retryDelayMs(task.retry, started.tryNumber) } : { state: 'failed' };
    await this.#finish(taskInstance, held, label, tryLog, outcome, { error: result.error, now, trace: running.trace });
  }

  /**
   * Writes the wait a try ended in (a deferral, a wait for input). Kept through an outage like an
   * outcome: a wait the database missed is not the task's failure (failing it would spend a try,
   * or end the task, for an outage). A task instance no longer this try's drops it (`dropped`),
   * after carrying out the stop a signal asked for, if one did; values the database refuses fail
   * the try (`refused`).
   */
  async #recordWait<T>(
    taskInstance: ClaimedTaskInstance,
    held: HeldTry,
    label: string,
    tryLog: TryLoggers,
    what: string,
    droppedWhy: string,
    write: () => Promise<T>,
  ): Promise<{ readonly kind: 'written'; readonly value: T } | { readonly kind: 'dropped' } | { readonly kind: 'refused'; readonly error: unknown }> {
    try {
      return { kind: 'written', value: await this.#recordPersistently(taskInstance.id, what, write) };
    } catch (error) {
      if (!(error instanceof TaskInstanceStateError)) return { kind: 'refused', error };
      if (!(await this.#carryOutStopRequest(taskInstance, held, label, tryLog)))
        this.log.warn({ task_instance_id: taskInstance.id, error: error.message }, `${label} ${droppedWhy}; dropped`);
      return { kind: 'dropped' };
    }
  }

  /**
   * Ends a try a signal stopped, as its request says (a new try, or an end state); the try's own
   * outcome, if any, is dropped. Returns whether there was a request to carry out.
   */
  async #carryOutStopRequest(taskInstance: ClaimedTaskInstance, held: HeldTry, label: string, tryLog: TryLoggers): Promise<boolean> {
    const done = await this.#recordPersistently(taskInstance.id, 'the stop a signal asked for', () =>
      this.storage.taskInstances.carryOutStopRequest(taskInstance.id, held, this.clock.now()),
    );
    if (done === null) return false;
    this.#countOutcome(taskInstance, done === 'restart' ? 'scheduled' : done);
    tryLog.worker.info(
      { state: done === 'restart' ? 'scheduled' : done, code: 'DF_TASK_STOPPED_BY_SIGNAL' },
      done === 'restart' ? `${label} stopped by a signal; it runs again as a new try` : `${label} stopped by a signal; ${done}`,
    );
    await this.#taskLogs.flush();
    return true;
  }

  /** A try's span, opened as it starts (null when tracing is off). */
  #startTrySpan(taskInstance: ClaimedTaskInstance, tryNumber: number, resumeMethod: string | null): TrySpan | null {
    return (
      this.tracing?.startTry(taskInstance, { tryNumber, resumeMethod, workerJobId: this.jobId!, hostname: this.options.hostname, startedAt: Date.now() }) ??
      null
    );
  }

  /**
   * Emits the task instance's root span now that it ended (see tracing.ts), from when it was made:
   * its history's first row. A failure to read it costs the trace its root, nothing else.
   */
  #traceTaskInstanceEnd(taskInstance: ClaimedTaskInstance, state: string, tries: number): void {
    const tracing = this.tracing;
    if (!tracing) return;
    const emitted = this.storage.taskInstances.listStateChanges([taskInstance.id]).then(
      (changes) => {
        // Ended now, after the try's own span (which ends once this outcome is written).
        const endedAt = Date.now();
        tracing.recordTaskInstance(taskInstance, { state, tries, madeAt: changes[0]?.at ?? endedAt, endedAt });
      },
      (error: unknown) =>
        this.log.warn({ task_instance_id: taskInstance.id, ...errorFields(error, 'DF_DATABASE') }, 'reading a task instance history for its trace failed'),
    );
    // Waited for at shutdown, before the process's spans are sent.
    this.#rootSpans.add(emitted);
    void emitted.finally(() => this.#rootSpans.delete(emitted));
  }

  #openTaskLog(taskInstance: ClaimedTaskInstance, started: StartedTaskInstance): TryLoggers {
    return this.#taskLogs.open({
      task_instance_id: taskInstance.id,
      dag_id: taskInstance.dagId,
      task_id: taskInstance.taskId,
      run_id: taskInstance.runId,
      try_number: started.tryNumber,
    });
  }

  /**
   * Writes what a try came to (or its start), retrying with backoff for as long as this worker runs: a database
   * outage or a failover must not strand a finished task (its slot stays taken meanwhile, and
   * the worker's heartbeat, failing too, lets the scheduler take over if the outage outlasts
   * the zombie threshold). Values the database refuses, or a worker stopping, end the tries.
   */
  async #recordPersistently<T>(taskInstanceId: number, what: string, write: () => Promise<T>): Promise<T> {
    for (let failures = 0; ; failures++) {
      try {
        const written = await write();
        if (failures > 0)
          this.log.info(
            { task_instance_id: taskInstanceId, failed_writes: failures },
            `recorded ${what} of task instance ${taskInstanceId} after ${failures} failed write(s)`,
          );
        return written;
      } catch (error) {
        // A state error is the database's answer (cleared, stopped meanwhile), not an outage.
        if (!this.isRunning || this.database.adapter.refusesValues(error) || error instanceof TaskInstanceStateError) throw error;
        const pauseMs = Math.min(RECORD_RETRY_MAX_MS, RECORD_RETRY_MS * 2 ** failures);
        if (failures === 0)
          this.log.warn(
            { task_instance_id: taskInstanceId, retry_in_ms: pauseMs, ...errorFields(error, 'DF_DATABASE') },
            `recording ${what} of task instance ${taskInstanceId} failed; retrying with backoff while the worker runs`,
          );
        await this.#retryWaits.sleep(pauseMs);
      }
    }
  }

  #countOutcome(taskInstance: ClaimedTaskInstance, state: string): void {
    this.metrics.worker().outcomes.inc({ state, operator: taskInstance.operator ?? 'unknown' });
  }

  /** Logs the outcome to the task's log and writes that log, then records the outcome: a finished task's log is complete. */
  async #finish(
    taskInstance: ClaimedTaskInstance,
    held: HeldTry,
    label: string,
    tryLog: TryLoggers,
    outcome: TaskOutcome,
    /** The error it failed with; when it was decided (default now); why, in words; the try's span. */
    {
      error,
      now = this.clock.now(),
      why,
      trace,
    }: { readonly error?: unknown; readonly now?: number; readonly why?: string; readonly trace?: TrySpan | null } = {},
  ): Promise<void> {
    const fields = { state: outcome.state, ...(error === undefined ? {} : { code: codeOf(error, 'DF_TASK_FAILED'), ...describeThrown(error) }) };
    if (error === undefined) {
      tryLog.worker.info(fields, `${label} ${outcome.state}${why ? `: ${why}` : ''}`);
    } else {
      // "failed" or "up_for_retry", then why: the state says whether a retry follows.
      tryLog.worker.error(fields, `${label} ${outcome.state}: ${describeThrown(error).error}`);
    }
    await this.#taskLogs.flush();
    const recorded = await this.#recordPersistently(taskInstance.id, `its outcome (${outcome.state})`, () =>
      this.storage.taskInstances.finishTaskInstance(taskInstance.id, held, outcome, now),
    );
    if (recorded) {
      this.#countOutcome(taskInstance, outcome.state);
      trace?.outcome(outcome.state, error);
      if (TASK_END_STATES.includes(outcome.state as TaskEndState)) this.#traceTaskInstanceEnd(taskInstance, outcome.state, held.tryNumber);
    }
    // A signal asked to stop it before the outcome was written: the request wins.
    if (!recorded && (await this.#carryOutStopRequest(taskInstance, held, label, tryLog))) return;
    if (!recorded)
      this.log.warn(
        { task_instance_id: taskInstance.id, state: outcome.state },
        `${label} ended (${outcome.state}) but is no longer this worker's; outcome dropped`,
      );
  }
}

/**
 * A try whose code runs on this worker: `controller` aborts it (its execution timeout, a signal's
 * stop, the try taken over, the worker giving up on it at shutdown); `settled` once the code came
 * to an outcome, from when on nothing aborts or reports it (the outcome's write decides).
 */
interface RunningTry {
  readonly controller: AbortController;
  readonly held: HeldTry;
  readonly label: string;
  settled: boolean;
  /** Its span, when tracing is on. */
  readonly trace: TrySpan | null;
}

/** The pause before the first retry of an outcome write; it doubles with each failure, up to RECORD_RETRY_MAX_MS. */
const RECORD_RETRY_MS = 500;
const RECORD_RETRY_MAX_MS = 30_000;

export { MAX_RETURN_VALUE_BYTES } from './task-runner.ts';

/**
 * `work`, or the reason `cancel` is aborted: a TaskExecutionTimeoutError at `deadline` (which
 * aborts it), or a signal's stop. JavaScript cannot be preempted: work that ignores its signal
 * may go on in the background, but its result is ignored.
 */
async function untilAborted<T>(work: Promise<T>, deadline: number | null, clock: Clock, label: string, cancel: AbortController): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  if (deadline !== null) timer = setTimeout(() => cancel.abort(new TaskExecutionTimeoutError(label, deadline)), Math.max(0, deadline - clock.now()));
  let onAbort: (() => void) | undefined;
  const aborted = new Promise<never>((_, reject) => {
    onAbort = () => reject(cancel.signal.reason);
    if (cancel.signal.aborted) onAbort();
    else cancel.signal.addEventListener('abort', onAbort, { once: true });
  });
  aborted.catch(() => {}); // settled by the race, or never looked at once the work won
  try {
    return await Promise.race([work, aborted]);
  } finally {
    clearTimeout(timer);
    cancel.signal.removeEventListener('abort', onAbort!);
  }
}
