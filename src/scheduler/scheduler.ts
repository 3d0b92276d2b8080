import type { Logger } from 'pino';
import type { Database } from '../db/connect.ts';
import { SCHEDULER_JOB_TYPE, type TaskInstanceState } from '../db/schema.ts';
import { describeThrown, errorFields, TaskInstanceStateError } from '../errors.ts';
import { InterruptibleSleep } from '../time/interruptible-sleep.ts';
import { Daemon } from '../jobs/daemon.ts';
import type { JobRow } from '../jobs/job-row.ts';
import { signalRunId, Storage, type Deferral, type UnfinishedDagRun } from '../storage/index.ts';
import { triggerHash } from '../triggers/base-trigger.ts';
import { renderStartTriggerKwargs } from '../triggers/start-trigger-kwargs.ts';
import type { DagSource, SchedulerDag, StartTrigger } from '../model/scheduler-dag.ts';
import { decide, FINISHED_STATES } from '../model/trigger-rules.ts';
import { dueDataIntervals, MAX_RUNS_PER_CHECK, nextDueAt } from '../model/schedule.ts';
import type { SignalSchedule } from '../model/scheduler-dag.ts';
import { SignalService, type SignalSubscription } from '../signals/signal-service.ts';
import { retryDelayMs } from '../model/retry-policy.ts';

/** Longest between two looks for new versions of a DAG's signal key when no push woke the scheduler. */
const SIGNAL_SAFETY_CHECK_MS = 5_000;

export interface SchedulerOptions {
  readonly pollIntervalMs: number;
  readonly heartbeatIntervalMs: number;
  /** A worker silent this long is dead: its task instances are retried or failed. */
  readonly zombieThresholdMs: number;
  /** Most unfinished DAG runs looked at in one pass. */
  readonly runsPerPass: number;
  readonly hostname: string;
  /** Wake on pushed work (PostgreSQL LISTEN/NOTIFY) as well as every pass. @default true */
  readonly push?: boolean;
}

/*
 * A scheduler pass:
 * - DAGs with a schedule whose next data interval has ended → a scheduled run (see
 *   src/dags/schedule.ts);
 * - up_for_retry / up_for_reschedule task instances whose ready_at passed → scheduled;
 * - task instances of dead workers (zombies) → scheduled (never started), up_for_retry or failed;
 * - for each unfinished DAG run (queued → running on its first pass): every task instance with
 *   no state whose trigger rule is met → scheduled (a start-from-trigger task is deferred at
 *   once, no worker involved); one whose rule can no longer be met → skipped or upstream_failed;
 *   once every task instance is finished, the run → success, or failed if a leaf task failed.
 * Every write is conditional on the state it leaves, so several schedulers may run at once.
 * The scheduler reads DAG structure through a DagSource and never imports DAG code.
 */
export class Scheduler extends Daemon {
  #loop: Promise<void> | null = null;
  readonly #pause = new InterruptibleSleep();
  /** Per DAG: when to look for due scheduled runs again (null: never, until its JSON changes). */
  readonly #nextScheduleCheck = new Map<string, { hash: string; at: number | null }>();
  /** Unfinished runs whose DAG is not among the serialized DAGs, already warned about. */
  readonly #waitingForDag = new Set<string>();
  /** Called after a pass scheduled task instances (standalone wires it to the worker's wake()). */
  onWork: (() => void) | null = null;
  /** DAGs scheduled on a signal, by key, and the subscription that wakes the scheduler on each send. */
  readonly #signalKeys = new Map<string, { dagIds: Set<string>; subscription: Promise<SignalSubscription> | null }>();
  /** Per signal-scheduled DAG with no signal run yet and no startDate: the version it runs after. */
  readonly #signalStart = new Map<string, number>();

  constructor(
    private readonly database: Database,
    readonly options: SchedulerOptions,
    private readonly dags: DagSource,
    log: Logger,
  ) {
    super(new Storage(database), log, {
      kind: 'scheduler',
      jobType: SCHEDULER_JOB_TYPE,
      hostname: options.hostname,
      capacity: null,
      heartbeatIntervalMs: options.heartbeatIntervalMs,
    });
  }

  /** Runs the next pass now instead of after the poll interval. */
  wake(): void {
    this.#pause.wake();
  }

  protected run(job: JobRow): void {
    this.log.info({ job_id: job.id }, `scheduler ${job.id} started`);
    this.subscribeWakeups(this.database, 'scheduler', () => this.wake(), this.options.push ?? true);
    this.#loop = this.#passes();
  }

  protected async shutdown(): Promise<void> {
    this.#pause.wake();
    await this.#loop;
    for (const { subscription } of this.#signalKeys.values()) (await subscription?.catch(() => null))?.close();
    this.#signalKeys.clear();
  }

  async #passes(): Promise<void> {
    while (this.isRunning) {
      try {
        await this.pass();
      } catch (error) {
        this.log.error(errorFields(error, 'DF_DATABASE'), 'scheduler pass failed; retrying next pass');
      }
      await this.#pause.sleep(await this.#pauseAfterPass());
    }
  }

  /**
   * The poll interval; while pushes work, the safety net's longer pause, cut short at the next
   * moment something comes due by time alone (a retry or reschedule, a scheduled interval).
   */
  async #pauseAfterPass(): Promise<number> {
    const pause = this.safetyNetPause(this.database, this.options.pollIntervalMs);
    if (pause === this.options.pollIntervalMs) return pause;
    let due = Number.POSITIVE_INFINITY;
    try {
      due = (await this.storage.nextReadyAt()) ?? due;
    } catch {
      return this.options.pollIntervalMs;
    }
    for (const { at } of this.#nextScheduleCheck.values()) if (at !== null && at < due) due = at;
    return Math.max(this.options.pollIntervalMs, Math.min(pause, due - Date.now()));
  }

  /** One pass (see the top of this file). Public so a standalone process can drive it too. */
  async pass(now = Date.now()): Promise<void> {
    await this.#createScheduledRuns(now);
    const ready = await this.storage.scheduleReadyTaskInstances(now);
    if (ready > 0) this.log.info({ rescheduled: ready }, `${ready} task instance(s) ready to run again`);
    const reaped = await this.storage.reapZombieTaskInstances(now - this.options.zombieThresholdMs, now, async (zombie) => {
      const task = (await this.dags(zombie.dagId))?.tasks.find((candidate) => candidate.taskId === zombie.taskId);
      return now + (task ? retryDelayMs(task.retry, zombie.tryNumber) : 0);
    });
    if (reaped.requeued + reaped.retried + reaped.failed > 0) {
      this.log.warn({ ...reaped }, `task instances of dead workers: ${reaped.requeued} requeued, ${reaped.retried} to retry, ${reaped.failed} failed`);
    }
    let madeWork = ready > 0 || reaped.requeued + reaped.retried > 0;
    const dags = new Map<string, SchedulerDag | null>();
    for (const run of await this.storage.listUnfinishedDagRuns(this.options.runsPerPass)) {
      if (!dags.has(run.dagId)) dags.set(run.dagId, await this.dags(run.dagId));
      const dag = dags.get(run.dagId)!;
      if (!dag) {
        // Said once per run until its DAG is back, not every pass.
        const key = `${run.dagId}\u0000${run.runId}`;
        if (!this.#waitingForDag.has(key)) {
          this.#waitingForDag.add(key);
          this.log.warn(
            { dag_id: run.dagId, run_id: run.runId },
            `DAG ${run.dagId} is not among the serialized DAGs (deleted, or its file not found); run ${run.runId} waits until it is back`,
          );
        }
        continue;
      }
      this.#waitingForDag.delete(`${run.dagId}\u0000${run.runId}`);
      if (await this.#advance(run, dag, now)) madeWork = true;
    }
    if (madeWork) this.onWork?.();
  }

  /**
   * Creates the scheduled runs whose data interval has ended. A DAG is looked at again only once
   * its next interval can have ended (or its serialized JSON changed); runs are created through
   * the unique keys, so several schedulers, or a restart, never create one twice.
   */
  async #createScheduledRuns(now: number): Promise<void> {
    for (const { dagId, hash } of await this.storage.listActiveDags()) {
      const known = this.#nextScheduleCheck.get(dagId);
      if (known?.hash === hash && (known.at === null || now < known.at)) continue;
      try {
        const dag = await this.dags(dagId);
        if (dag?.signalSchedule) {
          const more = await this.#createSignalRuns(dag, dag.signalSchedule, now);
          // A send wakes the scheduler (see #listenFor); this look is the safety net.
          this.#nextScheduleCheck.set(dagId, { hash, at: more ? now : now + SIGNAL_SAFETY_CHECK_MS });
          continue;
        }
        if (!dag?.schedule) {
          this.#nextScheduleCheck.set(dagId, { hash, at: null });
          continue;
        }
        let last = await this.storage.latestScheduledLogicalDate(dagId);
        for (const interval of dueDataIntervals(dag.schedule, last, now)) {
          const runId = `scheduled__${new Date(interval.start).toISOString()}`;
          const created = await this.storage.createDagRun(
            dag,
            { runId, runType: 'scheduled', logicalDate: interval.start, conf: {}, dataInterval: interval },
            now,
          );
          if (created !== null)
            this.log.info(
              { dag_id: dagId, run_id: runId },
              `created scheduled run ${dagId} ${runId} (data interval to ${new Date(interval.end).toISOString()})`,
            );
          last = interval.start;
        }
        this.#nextScheduleCheck.set(dagId, { hash, at: nextDueAt(dag.schedule, last) });
      } catch (error) {
        // One DAG's broken schedule must not stop the others'.
        this.log.error({ dag_id: dagId, ...errorFields(error, 'DF_DATABASE') }, `creating scheduled runs of ${dagId} failed: ${describeThrown(error).error}`);
        this.#nextScheduleCheck.set(dagId, { hash, at: now + 60_000 });
      }
    }
  }

  /**
   * One run per version of the DAG's signal key after the last it has a run for (see
   * SignalSchedule). Returns whether more versions wait than one look creates.
   */
  async #createSignalRuns(dag: SchedulerDag, schedule: SignalSchedule, now: number): Promise<boolean> {
    this.#listenFor(schedule.key, dag.dagId);
    let after = await this.storage.latestSignalRunVersion(dag.dagId);
    if (after === null) {
      if (schedule.startDate !== null) after = 0;
      else {
        after = this.#signalStart.get(dag.dagId) ?? (await this.storage.latestSignalVersions([schedule.key])).get(schedule.key) ?? 0;
        this.#signalStart.set(dag.dagId, after);
      }
    }
    const signals = await this.storage.signalsAfter(new Map([[schedule.key, after]]), MAX_RUNS_PER_CHECK);
    for (const signal of signals) {
      if (schedule.startDate !== null && signal.sentAt < schedule.startDate) continue;
      const runId = signalRunId(signal.version);
      const conf = { signal: { key: signal.key, version: signal.version, value: signal.value, sentAt: new Date(signal.sentAt).toISOString() } };
      // The logical date is the send time; two sends in one millisecond take the next free one.
      for (let offset = 0; ; offset++) {
        const created = await this.storage.createDagRun(dag, { runId, runType: 'scheduled', logicalDate: signal.sentAt + offset, conf }, now);
        if (created !== null) {
          this.log.info(
            { dag_id: dag.dagId, run_id: runId, signal_key: signal.key, signal_version: signal.version },
            `created run ${dag.dagId} ${runId} for signal ${signal.key} version ${signal.version}`,
          );
          break;
        }
        // Another scheduler made it, or the moment is taken by another run.
        if ((await this.storage.findDagRun(dag.dagId, runId)) !== null || offset >= 1000) break;
      }
    }
    return signals.length === MAX_RUNS_PER_CHECK;
  }

  /** Wakes the scheduler on each send on `key`, so a signal-scheduled run starts within the push latency. */
  #listenFor(key: string, dagId: string): void {
    let entry = this.#signalKeys.get(key);
    if (!entry) {
      entry = { dagIds: new Set(), subscription: null };
      this.#signalKeys.set(key, entry);
      const dagIds = entry.dagIds;
      entry.subscription = SignalService.of(this.database, this.log).listen(key, () => {
        for (const id of dagIds) this.#nextScheduleCheck.delete(id);
        this.wake();
      });
      entry.subscription.catch((error: unknown) => {
        this.#signalKeys.delete(key);
        this.log.warn({ signal_key: key, ...errorFields(error, 'DF_DATABASE') }, `listening for signal ${key} failed; its runs start at the next look`);
      });
    }
    entry.dagIds.add(dagId);
  }

  /** Returns whether task instances were scheduled (work for workers). */
  async #advance(run: UnfinishedDagRun, dag: SchedulerDag, now: number): Promise<boolean> {
    if (run.state === 'queued' && (await this.storage.setDagRunState(run.id, 'queued', 'running', now))) {
      this.log.info({ dag_id: run.dagId, run_id: run.runId }, `DAG run ${run.dagId} ${run.runId} running`);
    }
    if (!(await this.storage.runNeedsDecisions(run.dagId, run.runId, FINISHED_STATES))) return false;
    const instances = await this.storage.taskInstancesOfRun(run.dagId, run.runId);
    const stateOf = new Map(instances.map((ti) => [ti.taskId, ti.state]));
    const tasks = new Map(dag.tasks.map((task) => [task.taskId, task]));
    const decided = { scheduled: [] as number[], skipped: [] as number[], upstream_failed: [] as number[], failed: [] as number[] };
    const startDeferrals = new Map<number, Deferral>();
    for (const ti of instances) {
      const task = tasks.get(ti.taskId);
      if (ti.state !== null || !task) continue;
      const decision = decide(
        task.triggerRule,
        task.upstreamTaskIds.map((id) => stateOf.get(id) ?? null),
      );
      if (decision === 'schedule') {
        try {
          if (task.startTrigger) startDeferrals.set(ti.id, startDeferral(run.dagId, task.startTrigger, now));
          else decided.scheduled.push(ti.id);
        } catch (error) {
          // Its start trigger cannot be built: it fails alone; the run and other DAGs go on.
          this.log.error(
            { dag_id: run.dagId, run_id: run.runId, task_id: ti.taskId, ...errorFields(error, 'DF_TRIGGER_FAILED') },
            `${run.dagId}.${ti.taskId} cannot start from its trigger; failed`,
          );
          decided.failed.push(ti.id);
        }
      } else if (decision === 'skip') decided.skipped.push(ti.id);
      else if (decision === 'upstream_failed') decided.upstream_failed.push(ti.id);
    }
    const scheduled = await this.storage.decideTaskInstances(decided.scheduled, 'scheduled', now);
    await this.storage.decideTaskInstances(decided.skipped, 'skipped', now);
    await this.storage.decideTaskInstances(decided.upstream_failed, 'upstream_failed', now);
    await this.storage.decideTaskInstances(decided.failed, 'failed', now);
    // Tasks that start from a trigger go from no state straight to deferred, in one statement:
    // no worker slot, and no moment in which a worker could claim them.
    for (const [id, deferral] of startDeferrals) {
      try {
        await this.storage.deferTaskInstance(id, deferral, now);
        scheduled.push(id);
      } catch (error) {
        // Another scheduler decided it first (or it was cleared): nothing to do here.
        if (!(error instanceof TaskInstanceStateError)) throw error;
      }
    }

    const changed = decided.skipped.length + decided.upstream_failed.length + decided.failed.length + scheduled.length > 0;
    const states = changed ? new Map((await this.storage.taskInstancesOfRun(run.dagId, run.runId)).map((ti) => [ti.taskId, ti.state])) : stateOf;
    if (![...states.values()].every((state) => state !== null && FINISHED_STATES.includes(state))) return scheduled.length > 0;
    const outcome = leavesSucceeded(dag, states) ? 'success' : 'failed';
    if (await this.storage.setDagRunState(run.id, 'running', outcome, now)) {
      this.log.info({ dag_id: run.dagId, run_id: run.runId, state: outcome }, `DAG run ${run.dagId} ${run.runId} ${outcome}`);
    }
    return scheduled.length > 0;
  }
}

/** The deferral a start trigger makes, its kwargs rendered for a task starting at `now`. */
function startDeferral(dagId: string, start: StartTrigger, now: number): Deferral {
  const serializedTrigger = { classpath: start.classpath, kwargs: renderStartTriggerKwargs(start.kwargs, now, dagId) };
  return {
    serializedTrigger,
    triggerHash: triggerHash(serializedTrigger),
    method: start.method,
    kwargs: start.nextKwargs,
    timeoutMs: start.timeoutMs,
    startFromTrigger: true,
  };
}

/** A run succeeds when every leaf task (one nothing depends on) succeeded or was skipped. */
function leavesSucceeded(dag: SchedulerDag, states: ReadonlyMap<string, TaskInstanceState | null>): boolean {
  const upstreamOfSomething = new Set(dag.tasks.flatMap((task) => task.upstreamTaskIds));
  return dag.tasks
    .filter((task) => !upstreamOfSomething.has(task.taskId))
    .every((task) => states.get(task.taskId) === 'success' || states.get(task.taskId) === 'skipped');
}
