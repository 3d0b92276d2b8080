import type { Logger } from 'pino';
import { livenessThresholds } from '../liveness-options.ts';
import { readDatabaseFigures } from '../../services/observability/database-figures.ts';
import type { Database } from '../../database/connect.ts';
import { SCHEDULER_JOB_TYPE, type TaskInstanceState } from '../../database/schema.ts';
import { describeThrown, errorFields, TaskInstanceStateError } from '../../vocabulary/errors.ts';
import { InterruptibleSleep } from '../../vocabulary/time/interruptible-sleep.ts';
import { Daemon, HEALTH_HEARTBEAT_INTERVALS, WOKEN_PASS_PACING, type DaemonRuntime } from '../../services/jobs/daemon.ts';
import { PassPacer } from '../../vocabulary/time/pass-pacer.ts';
import type { JobRow } from '../../services/jobs/job-row.ts';
import { signalRunId, type Deferral, type PlanToApply, type UnfinishedDagRun, openStores, type Stores } from '../../storage/index.ts';
import { triggerHash } from '../../authoring/triggers/base-trigger.ts';
import { renderStartTriggerKwargs } from '../../authoring/triggers/start-trigger-kwargs.ts';
import type { DagSource, SchedulerDag, SchedulerTask, StartTrigger } from '../../model/scheduler-dag.ts';
import { decide, FINISHED_STATES } from '../../model/trigger-rules.ts';
import { planSignalAction, startDecision, type SignalActionPlan } from '../../model/signal-actions.ts';
import type { PendingSignalAction } from '../../storage/index.ts';
import { dueDataIntervals, MAX_RUNS_PER_CHECK, nextDueAt } from '../../model/schedule.ts';
import type { SignalSchedule } from '../../model/scheduler-dag.ts';
import { SignalService, type SignalSubscription } from '../../services/signals/signal-service.ts';
import { retryDelayMs } from '../../model/retry-policy.ts';

/**
 * Longest between two looks for new versions of a DAG's signal key when no send woke the
 * scheduler. Sends reach it through its signal listener, which polls the database itself (every
 * second when pushes do not arrive, once a minute when they do: see SignalService), so this look
 * is only a guard behind that one, and rare: each costs an idle scheduler four statements.
 */
const SIGNAL_SAFETY_CHECK_MS = 300_000;
/** Most task instances with a signal version to act on looked at in one pass (the next pass goes on). */
const SIGNAL_ACTIONS_PER_PASS = 500;

/** The scheduler's options: intervals, thresholds and the DAG source. */
export interface SchedulerOptions {
  /** Pause between passes when nothing wakes it, in ms. */
  readonly pollIntervalMs: number;
  /** How often it heartbeats its job row, in ms. */
  readonly heartbeatIntervalMs: number;
  /** A worker silent this long is dead: its task instances are retried or failed. */
  readonly zombieThresholdMs: number;
  /** Most unfinished DAG runs looked at in one pass. */
  readonly runsPerPass: number;
  /** The host its job row names. */
  readonly hostname: string;
  /** Wake on pushed work (PostgreSQL LISTEN/NOTIFY) as well as every pass. @default true */
  readonly push?: boolean;
  /** How often it records its figures for the status page's charts, in ms; 0: never. @default 60 s */
  readonly sampleIntervalMs?: number;
}

/** The stores a scheduler uses: its job row, DAG runs and their task instances, signal actions and schedules, serialized DAGs, the waiting-work gauges. */
export type SchedulerStores = Pick<Stores, 'jobs' | 'dagRuns' | 'taskInstances' | 'signals' | 'serializedDags' | 'maintenance' | 'inputs'>;

/**
 * The scheduler daemon: moves DAG runs through their tasks, from serialized DAGs (never DAG code).
 *
 * A scheduler pass:
 * - DAGs with a schedule whose next data interval has ended → a scheduled run (see
 *   src/model/schedule.ts);
 * - up_for_retry / up_for_reschedule task instances whose ready_at passed → scheduled;
 * - task instances of dead workers (zombies) → scheduled (never started), up_for_retry or failed;
 * - for each unfinished DAG run (queued → running on its first pass): every task instance with
 *   no state whose trigger rule is met → scheduled (a start-from-trigger task is deferred at
 *   once, no worker involved); one whose rule can no longer be met → skipped or upstream_failed;
 *   once every task instance is finished, the run → success, or failed if a leaf task failed.
 * Every write is conditional on the state it leaves, so several schedulers may run at once.
 * The scheduler reads DAG structure through a DagSource and never imports DAG code.
 */
export class Scheduler extends Daemon<SchedulerStores> {
  #loop: Promise<void> | null = null;
  readonly #pause = new InterruptibleSleep();
  /** Paces the passes wake-ups start (one per finished task): see WOKEN_PASS_PACING. */
  readonly #pacer = new PassPacer(WOKEN_PASS_PACING);
  /** Per DAG: when to look for due scheduled runs again (null: never, until its JSON changes). */
  readonly #nextScheduleCheck = new Map<string, { hash: string; at: number | null }>();
  /** Unfinished runs whose DAG is not among the serialized DAGs, already warned about. */
  readonly #waitingForDag = new Set<string>();
  /** Called after a pass scheduled task instances (standalone wires it to the worker's wake()). */
  onWork: (() => void) | null = null;
  /** When the next retry or reschedule comes due, as the last pass read it (undefined: unknown, the pass failed). */
  #nextReadyAt: number | null | undefined = undefined;
  /** Signal-scheduled DAGs whose key was sent on since their last look: looked at on the next pass. */
  readonly #signalSent = new Set<string>();
  /** Whether some DAG seen declares signal actions: only then does a pass look for versions to act on. */
  #signalActionsDeclared = false;
  /** DAGs scheduled on a signal (or declaring actions on it), by key, and the subscription that wakes the scheduler on each send. */
  readonly #signalKeys = new Map<string, { dagIds: Set<string>; subscription: Promise<SignalSubscription> | null }>();

  /** When the oldest heartbeat of a live worker holding tries passes the zombie threshold, if not renewed (clock ms); null: none. */
  #nextHolderStaleAt: number | null = null;

  constructor(
    database: Database,
    /** Its options, resolved. */
    readonly options: SchedulerOptions,
    private readonly dags: DagSource,
    log: Logger,
    /** Metrics and clock shared with the other components of its process. */
    runtime: DaemonRuntime = {},
  ) {
    super(
      database,
      runtime.stores ?? openStores(database),
      log,
      {
        kind: 'scheduler',
        jobType: SCHEDULER_JOB_TYPE,
        hostname: options.hostname,
        capacity: null,
        heartbeatIntervalMs: options.heartbeatIntervalMs,
        healthThresholdMs: HEALTH_HEARTBEAT_INTERVALS * options.heartbeatIntervalMs,
        sampleIntervalMs: options.sampleIntervalMs,
      },
      runtime,
    );
    this.metrics.scheduler();
    const thresholds = { ...livenessThresholds(), workerMs: options.zombieThresholdMs };
    this.metrics.databaseGauges(() => readDatabaseFigures(this.storage, this.liveness, thresholds));
  }

  /** The charts' figures: the deployment's waiting work (each scheduler counts the same). */
  protected override async readFigures(): Promise<Record<string, number>> {
    const counts = await this.storage.maintenance.countWaitingWork();
    return { deferred: counts.deferredTaskInstances, awaiting_input: counts.awaitingInput };
  }

  /** A worker whose process is gone may hold tries: the next pass retries them. */
  protected override onPeerGone(): void {
    this.wake();
  }

  /** Runs the next pass now instead of after the poll interval. */
  wake(): void {
    this.#pause.wake();
  }

  /** Starts its loop once its job row is registered (Daemon.start calls it). */
  protected run(job: JobRow): void {
    this.log.info({ job_id: job.id }, `scheduler ${job.id} started`);
    this.subscribeWakeups(this.database, { scheduler: () => this.wake() }, this.options.push ?? true);
    this.#loop = this.#passes();
  }

  /** Stops its loop and closes its signal subscriptions (Daemon.stop calls it, once). */
  protected async shutdown(): Promise<void> {
    this.#pause.wake();
    await this.#loop;
    for (const { subscription } of this.#signalKeys.values()) (await subscription?.catch(() => null))?.close();
    this.#signalKeys.clear();
  }

  async #passes(): Promise<void> {
    while (this.isRunning) {
      this.#pacer.passStarted();
      const endTimer = this.metrics.scheduler().passDuration.startTimer();
      try {
        await this.pass();
        endTimer();
      } catch (error) {
        this.log.error(errorFields(error, 'DF_DATABASE'), 'scheduler pass failed; retrying next pass');
      }
      // However often it is woken (each finished task pushes a wake-up), a pass reads every run
      // under way: a storm of wake-ups shares a pass every WOKEN_PASS_PACING.gapMs.
      await this.#pause.sleep(await this.#pauseAfterPass(), this.#pacer.floorMs());
    }
  }

  /**
   * The poll interval (while pushes work, the safety net's longer pause), cut short at the next
   * moment something comes due by time alone: a retry or reschedule, a scheduled interval, a
   * worker holding tries whose heartbeat would pass the zombie threshold. Cut short whatever the
   * poll interval: a retry due in 0.1 s is not left for a 30 s poll (the pacer's floor keeps a
   * moment that stays due from spinning passes, as the triggerer's does).
   */
  async #pauseAfterPass(): Promise<number> {
    const pause = this.safetyNetPause(this.database, this.options.pollIntervalMs);
    // The pass read when the next retry or reschedule comes due (new ones push a wake-up); a pass
    // that failed before it did not: poll.
    if (this.#nextReadyAt === undefined) return this.options.pollIntervalMs;
    let due = this.#nextReadyAt ?? Number.POSITIVE_INFINITY;
    for (const { at } of this.#nextScheduleCheck.values()) if (at !== null && at < due) due = at;
    if (this.#nextHolderStaleAt !== null && this.#nextHolderStaleAt < due) due = this.#nextHolderStaleAt;
    return Math.min(pause, Math.max(0, due - this.clock.now()));
  }

  /** One pass (see the top of this file). Public so a standalone process can drive it too. */
  async pass(now = this.clock.now()): Promise<void> {
    await this.#createScheduledRuns(now);
    this.#nextReadyAt = undefined;
    // The next ready_at first: an idle pass reads it and writes nothing.
    let nextReadyAt = await this.storage.taskInstances.nextReadyAt();
    const due = nextReadyAt !== null && nextReadyAt <= now;
    const ready = due ? await this.storage.taskInstances.scheduleReadyTaskInstances(now) : 0;
    // Questions past their deadline: answered by their defaults, or failed (DF_INPUT_TIMEOUT).
    const timedOut = due ? await this.storage.inputs.timeOutAwaitedInput(now) : { answeredByDefaults: 0, failed: 0 };
    const questionsTimedOut = timedOut.answeredByDefaults + timedOut.failed;
    if (ready > 0 || questionsTimedOut > 0) nextReadyAt = await this.storage.taskInstances.nextReadyAt();
    this.#nextReadyAt = nextReadyAt;
    if (ready > 0) this.log.info({ rescheduled: ready }, `${ready} task instance(s) ready to run again`);
    if (questionsTimedOut > 0)
      this.log.info(
        { answered_by_defaults: timedOut.answeredByDefaults, failed: timedOut.failed, code: timedOut.failed > 0 ? 'DF_INPUT_TIMEOUT' : undefined },
        `${questionsTimedOut} question(s) to people timed out: ${timedOut.answeredByDefaults} answered by their defaults, ${timedOut.failed} failed for want of them`,
      );
    // Workers found dead: their liveness lock let go (killed, cut off), their heartbeat past the
    // zombie threshold (frozen), their job ended or gone. One read when none is (the usual case).
    const holders = await this.storage.taskInstances.listTaskHolders();
    // A frozen worker keeps its lock: its heartbeat tells, once past the threshold, and the pause
    // after this pass ends no later than that.
    const { dead: deadWorkers, nextStaleAt } =
      holders.length === 0 ? { dead: [], nextStaleAt: null } : await this.deadAmong(holders, this.options.zombieThresholdMs);
    this.#nextHolderStaleAt = nextStaleAt;
    const reaped = await this.storage.taskInstances.reapZombieTaskInstances(deadWorkers, now, async (zombie) => {
      const task = (await this.dags(zombie.dagId))?.tasks.find((candidate) => candidate.taskId === zombie.taskId);
      return now + (task ? retryDelayMs(task.retry, zombie.tryNumber) : 0);
    });
    if (reaped.requeued + reaped.retried + reaped.failed > 0) {
      this.log.warn({ ...reaped }, `task instances of dead workers: ${reaped.requeued} requeued, ${reaped.retried} to retry, ${reaped.failed} failed`);
    }
    // Retries it just set may come due before the next ready_at read above.
    if (reaped.retried > 0) this.#nextReadyAt = await this.storage.taskInstances.nextReadyAt();
    if (reaped.stopped > 0) this.log.info({ stopped: reaped.stopped }, `${reaped.stopped} task instance(s) of dead workers stopped as their signals asked`);
    let madeWork = ready > 0 || questionsTimedOut > 0 || reaped.requeued + reaped.retried + reaped.stopped > 0;
    const dags = new Map<string, SchedulerDag | null>();
    const dagOf = async (dagId: string) => {
      if (!dags.has(dagId)) dags.set(dagId, await this.dags(dagId));
      return dags.get(dagId)!;
    };
    const runs = await this.storage.dagRuns.listUnfinishedDagRuns(this.options.runsPerPass);
    const signalStarts = new Map<number, PendingSignalAction[]>();
    // Signal actions are taken only in unfinished runs: with none, an idle pass reads no further.
    if (this.#signalActionsDeclared && runs.length > 0 && (await this.#actOnSignals(dagOf, signalStarts, now))) madeWork = true;
    for (const run of runs) {
      const dag = await dagOf(run.dagId);
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
      if (await this.#advance(run, dag, now, signalStarts)) madeWork = true;
    }
    if (madeWork) this.onWork?.();
  }

  /**
   * Acts on the signal versions task instances have not taken into account yet (see
   * src/model/signal-actions.ts). Starts of task instances with no state are left to #advance,
   * through `starts`; the rest are carried out here, each once. Returns whether it made work.
   */
  async #actOnSignals(dagOf: (dagId: string) => Promise<SchedulerDag | null>, starts: Map<number, PendingSignalAction[]>, now: number): Promise<boolean> {
    let madeWork = false;
    for (const pending of await this.storage.signals.pendingSignalActions(SIGNAL_ACTIONS_PER_PASS)) {
      const dag = await dagOf(pending.dagId);
      if (!dag) continue; // its DAG is gone for now: the version waits for it
      const task = dag.tasks.find((candidate) => candidate.taskId === pending.taskId);
      const action = task?.signalActions.find((candidate) => candidate.key === pending.key);
      // A task that no longer declares the action (its DAG changed) takes the version as seen.
      const plan: SignalActionPlan = action ? planSignalAction(action, pending.state, task?.startTrigger != null) : { kind: 'consume' };
      if (plan.kind === 'decide') {
        starts.set(pending.taskInstanceId, [...(starts.get(pending.taskInstanceId) ?? []), pending]);
        continue;
      }
      const applied = this.#planToApply(plan, pending, task, now);
      const outcome = await this.storage.signals.applySignalAction(pending, applied, now);
      const fields = {
        dag_id: pending.dagId,
        run_id: pending.runId,
        task_id: pending.taskId,
        signal_key: pending.key,
        signal_version: pending.latestVersion,
      };
      if (outcome === 'moved') {
        // It changed state between the read and the write: plan again on the next pass, soon.
        this.#pause.wake();
      } else if (outcome === 'acted' && applied.kind !== 'consume') {
        madeWork = true;
        const what =
          applied.kind === 'fresh-try'
            ? 'runs again as a new try'
            : applied.kind === 'restart-from-trigger'
              ? 'starts again from its trigger'
              : applied.kind === 'end'
                ? `stopped (${pending.state ?? 'no state'} → ${applied.state})`
                : `stopping its running try (${applied.request === 'restart' ? 'then a new try' : `then ${applied.request}`})`;
        this.log.info(fields, `signal ${pending.key} version ${pending.latestVersion}: ${pending.dagId}.${pending.taskId} (run ${pending.runId}) ${what}`);
      }
    }
    return madeWork;
  }

  /**
   * The plan as storage carries it out: a restart from the trigger with the deferral to record
   * built now; one whose start trigger cannot be built is refused, said, and only consumed (the
   * task stays as it is).
   */
  #planToApply(plan: Exclude<SignalActionPlan, { kind: 'decide' }>, pending: PendingSignalAction, task: SchedulerTask | undefined, now: number): PlanToApply {
    if (plan.kind !== 'restart-from-trigger') return plan;
    try {
      return { ...plan, startDeferral: startDeferral(pending.dagId, task!.startTrigger!, task!.queue, now) };
    } catch (error) {
      this.log.error(
        { dag_id: pending.dagId, run_id: pending.runId, task_id: pending.taskId, ...errorFields(error, 'DF_TRIGGER_FAILED') },
        `signal ${pending.key} version ${pending.latestVersion}: ${pending.dagId}.${pending.taskId} cannot start again from its trigger; the restart is dropped`,
      );
      return { kind: 'consume' };
    }
  }

  /**
   * Creates the scheduled runs whose data interval has ended. A DAG is looked at again only once
   * its next interval can have ended (or its serialized JSON changed); runs are created through
   * the unique keys, so several schedulers, or a restart, never create one twice.
   */
  async #createScheduledRuns(now: number): Promise<void> {
    const actionKeys = new Set<string>();
    for (const { dagId, hash, paused } of await this.storage.serializedDags.listActiveDags()) {
      // Paused: no run of its own (manual runs still run; see docs/events.md).
      if (paused) continue;
      const known = this.#nextScheduleCheck.get(dagId);
      if (known?.hash === hash && (known.at === null || now < known.at) && !this.#signalSent.has(dagId)) continue;
      // Cleared before the look: a send heard during it marks the DAG again, for the next pass.
      this.#signalSent.delete(dagId);
      try {
        const dag = await this.dags(dagId);
        for (const task of dag?.tasks ?? []) for (const action of task.signalActions) actionKeys.add(action.key);
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
        let last = await this.storage.dagRuns.latestScheduledLogicalDate(dagId);
        for (const interval of dueDataIntervals(dag.schedule, last, now)) {
          const runId = `scheduled__${new Date(interval.start).toISOString()}`;
          const created = await this.storage.dagRuns.createDagRun(
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
    // After the signal schedules, which subscribe from the version they read; an action's
    // versions are looked for on every pass anyway, the subscription only wakes the scheduler.
    for (const key of actionKeys) {
      this.#signalActionsDeclared = true;
      this.#listenFor(key, null);
    }
  }

  /**
   * One run per version of the DAG's signal key after the last it has a run for (see
   * SignalSchedule). Returns whether more versions wait than one look creates.
   */
  async #createSignalRuns(dag: SchedulerDag, schedule: SignalSchedule, now: number): Promise<boolean> {
    let after = await this.storage.dagRuns.latestSignalRunVersion(dag.dagId);
    if (after === null) {
      after = schedule.startDate !== null ? 0 : await this.storage.signals.signalScheduleStart(dag.dagId, schedule.key);
    }
    // Heard from `after` on: a send between this look and the subscription is not missed.
    this.#listenFor(schedule.key, dag.dagId, after);
    const signals = await this.storage.signals.signalsAfter(new Map([[schedule.key, after]]), MAX_RUNS_PER_CHECK);
    for (const signal of signals) {
      if (schedule.startDate !== null && signal.sentAt < schedule.startDate) continue;
      const runId = signalRunId(signal.version);
      const conf = { signal: { key: signal.key, version: signal.version, value: signal.value, sentAt: new Date(signal.sentAt).toISOString() } };
      // The logical date is the send time; two sends in one millisecond take the next free one.
      for (let offset = 0; ; offset++) {
        const created = await this.storage.dagRuns.createDagRun(dag, { runId, runType: 'scheduled', logicalDate: signal.sentAt + offset, conf }, now);
        if (created !== null) {
          this.log.info(
            { dag_id: dag.dagId, run_id: runId, signal_key: signal.key, signal_version: signal.version },
            `created run ${dag.dagId} ${runId} for signal ${signal.key} version ${signal.version}`,
          );
          break;
        }
        // Another scheduler made it, or the moment is taken by another run.
        if ((await this.storage.dagRuns.findDagRun(dag.dagId, runId)) !== null || offset >= 1000) break;
      }
    }
    return signals.length === MAX_RUNS_PER_CHECK;
  }

  /**
   * Wakes the scheduler on each send on `key`, so a signal-scheduled run (of `dagId`) starts, or
   * a signal action is carried out, within the push latency.
   */
  #listenFor(key: string, dagId: string | null, sinceVersion?: number): void {
    let entry = this.#signalKeys.get(key);
    if (!entry) {
      entry = { dagIds: new Set(), subscription: null };
      this.#signalKeys.set(key, entry);
      const dagIds = entry.dagIds;
      entry.subscription = SignalService.of(this.database, this.log).listen(
        key,
        () => {
          for (const id of dagIds) this.#signalSent.add(id);
          this.wake();
        },
        sinceVersion === undefined ? {} : { sinceVersion },
      );
      entry.subscription.catch((error: unknown) => {
        this.#signalKeys.delete(key);
        this.log.warn({ signal_key: key, ...errorFields(error, 'DF_DATABASE') }, `listening for signal ${key} failed; its runs start at the next look`);
      });
    }
    if (dagId !== null) entry.dagIds.add(dagId);
  }

  /**
   * Returns whether task instances were scheduled (work for workers). `signalStarts`: task
   * instances with no state and a new version of a key that starts them (see startDecision).
   */
  async #advance(run: UnfinishedDagRun, dag: SchedulerDag, now: number, signalStarts: ReadonlyMap<number, readonly PendingSignalAction[]>): Promise<boolean> {
    if (run.state === 'queued' && (await this.storage.dagRuns.setDagRunState(run.id, 'queued', 'running', now))) {
      this.log.info({ dag_id: run.dagId, run_id: run.runId }, `DAG run ${run.dagId} ${run.runId} running`);
    }
    if (!(await this.storage.dagRuns.runNeedsDecisions(run.dagId, run.runId, FINISHED_STATES))) return false;
    const instances = await this.storage.dagRuns.taskInstancesOfRun(run.dagId, run.runId);
    const stateOf = new Map(instances.map((ti) => [ti.taskId, ti.state]));
    const tasks = new Map(dag.tasks.map((task) => [task.taskId, task]));
    const decided = { scheduled: [] as number[], skipped: [] as number[], upstream_failed: [] as number[], failed: [] as number[] };
    const startDeferrals = new Map<number, Deferral>();
    for (const ti of instances) {
      const task = tasks.get(ti.taskId);
      if (ti.state !== null || !task) continue;
      let decision = decide(
        task.triggerRule,
        task.upstreamTaskIds.map((id) => stateOf.get(id) ?? null),
      );
      if (task.signalActions.length > 0) {
        const arrived = new Set((signalStarts.get(ti.id) ?? []).map((pending) => pending.key));
        decision = startDecision(decision, task.signalActions, arrived);
      }
      if (decision === 'schedule') {
        try {
          if (task.startTrigger) startDeferrals.set(ti.id, startDeferral(run.dagId, task.startTrigger, task.queue, now));
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
    // Started by a signal: one at a time, each with the versions that started it.
    const startsOf = (id: number) => (signalStarts.get(id) ?? []).map((pending) => ({ key: pending.key, version: pending.latestVersion }));
    const bySignal = decided.scheduled.filter((id) => signalStarts.has(id));
    const scheduled = await this.storage.dagRuns.decideTaskInstances(
      decided.scheduled.filter((id) => !signalStarts.has(id)),
      'scheduled',
      now,
    );
    for (const id of bySignal) if (await this.storage.signals.startOnSignal(id, startsOf(id), now)) scheduled.push(id);
    await this.storage.dagRuns.decideTaskInstances(decided.skipped, 'skipped', now);
    await this.storage.dagRuns.decideTaskInstances(decided.upstream_failed, 'upstream_failed', now);
    await this.storage.dagRuns.decideTaskInstances(decided.failed, 'failed', now);
    // Tasks that start from a trigger go from no state straight to deferred, in one statement:
    // no worker slot, and no moment in which a worker could claim them.
    for (const [id, deferral] of startDeferrals) {
      try {
        await this.storage.taskInstances.deferTaskInstance(id, deferral, now);
        scheduled.push(id);
        if (signalStarts.has(id)) await this.storage.signals.recordSignalStarts(id, startsOf(id));
      } catch (error) {
        // Another scheduler decided it first (or it was cleared): nothing to do here.
        if (!(error instanceof TaskInstanceStateError)) throw error;
      }
    }

    for (const id of scheduled) {
      for (const { key, version } of signalStarts.has(id) ? startsOf(id) : [])
        this.log.info(
          { dag_id: run.dagId, run_id: run.runId, task_instance_id: id, signal_key: key, signal_version: version },
          `signal ${key} version ${version} started task instance ${id} of ${run.dagId} run ${run.runId}`,
        );
    }

    const changed = decided.skipped.length + decided.upstream_failed.length + decided.failed.length + scheduled.length > 0;
    const states = changed ? new Map((await this.storage.dagRuns.taskInstancesOfRun(run.dagId, run.runId)).map((ti) => [ti.taskId, ti.state])) : stateOf;
    if (![...states.values()].every((state) => state !== null && FINISHED_STATES.includes(state))) return scheduled.length > 0;
    const outcome = leavesSucceeded(dag, states) ? 'success' : 'failed';
    if (await this.storage.dagRuns.setDagRunState(run.id, 'running', outcome, now)) {
      this.metrics.scheduler().dagRunsFinished.inc({ state: outcome });
      this.log.info({ dag_id: run.dagId, run_id: run.runId, state: outcome }, `DAG run ${run.dagId} ${run.runId} ${outcome}`);
    }
    return scheduled.length > 0;
  }
}

/** The deferral a start trigger makes, its kwargs rendered for a task starting at `now`, in the task's queue. */
function startDeferral(dagId: string, start: StartTrigger, queue: string, now: number): Deferral {
  const serializedTrigger = { classpath: start.classpath, kwargs: renderStartTriggerKwargs(start.kwargs, now, dagId) };
  return {
    serializedTrigger,
    triggerHash: triggerHash(serializedTrigger),
    method: start.method,
    kwargs: start.nextKwargs,
    timeoutMs: start.timeoutMs,
    startFromTrigger: true,
    queue,
  };
}

/** A run succeeds when every leaf task (one nothing depends on) succeeded or was skipped. */
function leavesSucceeded(dag: SchedulerDag, states: ReadonlyMap<string, TaskInstanceState | null>): boolean {
  const upstreamOfSomething = new Set(dag.tasks.flatMap((task) => task.upstreamTaskIds));
  return dag.tasks
    .filter((task) => !upstreamOfSomething.has(task.taskId))
    .every((task) => states.get(task.taskId) === 'success' || states.get(task.taskId) === 'skipped');
}
