import { Keyring, type StoredValue } from '../database/encryption/keyring.ts';
import type { Database } from '../database/connect.ts';
import { claimTriggers, type ClaimResult, type TriggerRow } from './claim-triggers.ts';
import type { FailureKwargs, StorageContext } from './context.ts';
import { deferTaskInstance, type Deferral, type DeferResult } from './defer-task-instance.ts';
import { deleteUnusedTriggers } from './delete-unused-triggers.ts';
import { failTimedOutDeferrals, nextDeferralDeadline } from './fail-timed-out-deferrals.ts';
import { moveDeferredTaskInstances, prepareMove, type MoveResult, type PreparedMove } from './move-deferred-task-instances.ts';
import { existingTriggerIds, listOwnedTriggerIds, loadOwnedTriggers, ownedTriggersDigest, releaseOwnedTriggers, type OwnedDigest } from './owned-triggers.ts';
import { releaseTriggersOfDeadTriggerers, releaseTriggersOfMissingTriggerers } from './release-dead-triggerers.ts';
import { endJob, heartbeatJob, registerJob, type JobFields } from './jobs.ts';
import { nextReadyAt, scheduleReadyTaskInstances } from './schedule-ready-task-instances.ts';
import { createDagRun, type NewDagRun } from './create-dag-run.ts';
import { clearTaskInstances, type ClearResult, type TaskInstanceToClear } from './clear-task-instances.ts';
import {
  decideTaskInstances,
  listUnfinishedDagRuns,
  runNeedsDecisions,
  setDagRunState,
  taskInstancesOfRun,
  type RunTaskInstance,
  type UnfinishedDagRun,
} from './dag-run-progress.ts';
import { reapZombieTaskInstances, type ReapResult, type ZombieTry } from './reap-zombie-task-instances.ts';
import { finishedTaskMs, runProgress, type RunProgress } from './run-progress.ts';
import { latestScheduledLogicalDate, latestSignalRunVersion, signalScheduleStart } from './latest-scheduled-run.ts';
import { findDagRun, listDagRuns, type DagRunRow } from './list-dag-runs.ts';
import { readResumeState, readReturnValue } from './read-task-instance-values.ts';
import { createTaskInstance, type NewTaskInstance } from './create-task-instance.ts';
import { readTaskInstance } from './read-task-instance.ts';
import type { TaskReschedule } from '../model/task-reschedule.ts';
import { taskReschedules } from './task-reschedules.ts';
import { readDagRunStates } from './read-dag-run-states.ts';
import { latestSignalVersions, pruneSignals, sendSignal, signalsAfter } from './signals.ts';
import {
  applySignalAction,
  pendingSignalActions,
  readActedSignal,
  recordSignalStarts,
  startOnSignal,
  type PendingSignalAction,
  type PlanToApply,
  type SignalStart,
  type SignalActionOutcome,
} from './signal-actions.ts';
import { carryOutStopRequest } from './stop-requests.ts';
import { checkHeldTries, type HeldTryNews } from './check-held-tries.ts';
import type { ActedSignal } from '../model/signal-actions.ts';
import type { StopRequest } from '../database/schema.ts';
import type { Signal } from '../model/signal.ts';
import type { DagRunStates, DagRunStatesKey } from '../model/dag-run-states.ts';
import { listJobs, type JobFilter, type JobListing } from './list-jobs.ts';
import { listTriggers, ownedTriggerCounts, type TriggerListing } from './list-triggers.ts';
import { listDeferredTaskInstances, type DeferredTaskInstance } from './list-deferred-task-instances.ts';
import { cleanDatabase, type CleanCounts } from './clean-database.ts';
import { resealValues, type ResealCounts } from './reseal-values.ts';
import { verifyEncryptionKeys } from './encryption-keys.ts';
import { openNextKwargs, type OpenedNextKwargs } from './sealed-values.ts';
import { countTriggers, countWaitingWork, type WaitingWorkCounts } from './count-waiting-work.ts';
import { listQuarantinedTriggers, type QuarantinedTrigger } from './quarantine-triggers.ts';
import { appendTaskLogLines, appendTriggerLogLines, type TaskLogLine, type TriggerLogLine } from './append-task-log-lines.ts';
import { readTaskLog, type StoredLogLine } from './read-task-log.ts';
import { taskLogTries } from './task-log-tries.ts';
import { taskInstancesOfRunId, type TaskInstanceOfRunId } from './task-instances-of-run-id.ts';
import { tryErrors, type TryError } from './try-errors.ts';
import { countSignalActionTasks, signalActionKeys, signalTriggerWaits, type SignalTriggerWait } from './signal-audience.ts';
import { listActiveDags, listImportErrors, listSerializedDags, readSerializedDag } from './serialized-dags.ts';
import type { DagRunState, TaskInstanceState } from '../database/schema.ts';
import type { TaskEndState } from '../authoring/triggers/trigger-event.ts';
import type { SchedulerDag } from '../model/scheduler-dag.ts';
import {
  claimTaskInstances,
  claimedButNotHeld,
  finishTaskInstance,
  handBackTaskInstance,
  startTaskInstance,
  type ClaimedTaskInstance,
  type StartedTaskInstance,
  type TaskOutcome,
  type WorkerIdentity,
} from './task-instance-transitions.ts';
import type { HeldTry } from './held-try.ts';

export type { ClaimResult, TriggerRow } from './claim-triggers.ts';
export type { OwnedDigest } from './owned-triggers.ts';
export type { MoveResult, PreparedMove } from './move-deferred-task-instances.ts';
export type { Deferral, DeferResult } from './defer-task-instance.ts';
export type { JobFields } from './jobs.ts';
export type { NewDagRun } from './create-dag-run.ts';
export type { NewTaskInstance } from './create-task-instance.ts';
export type { TaskReschedule } from '../model/task-reschedule.ts';
export type { ClearResult, TaskInstanceToClear } from './clear-task-instances.ts';
export type { RunTaskInstance, UnfinishedDagRun } from './dag-run-progress.ts';
export type { ReapResult, ZombieTry } from './reap-zombie-task-instances.ts';
export type { PendingSignalAction, PlanToApply, SignalActionOutcome } from './signal-actions.ts';
export type { TriggerListing } from './list-triggers.ts';
export type { CleanCounts } from './clean-database.ts';
export type { RunProgress } from './run-progress.ts';
export type { DagRunRow } from './list-dag-runs.ts';
export type { JobListing } from './list-jobs.ts';
export type { TaskLogLine, TriggerLogLine } from './append-task-log-lines.ts';
export type { StoredLogLine } from './read-task-log.ts';
export type { QuarantinedTrigger } from './quarantine-triggers.ts';
export type { DeferredTaskInstance } from './list-deferred-task-instances.ts';
export type { TaskInstanceOfRunId } from './task-instances-of-run-id.ts';
export type { ClaimedTaskInstance, StartedTaskInstance, TaskOutcome, WorkerIdentity } from './task-instance-transitions.ts';
export type { HeldTry } from './held-try.ts';
export type { HeldTryNews } from './check-held-tries.ts';
export { TRIGGER_FAILURE_METHOD, type FailureKwargs } from './context.ts';
export { signalRunId } from './latest-scheduled-run.ts';

export interface TriggerEventRecord {
  readonly triggerId: number;
  /** The event payload as JSON text. */
  readonly payloadJson: string;
  /** Set when the event ends its task instances (TaskEndEvent) instead of resuming them. */
  readonly endState?: TaskEndState | null;
}

export interface TriggerFailureRecord {
  readonly triggerId: number;
  readonly failure: FailureKwargs;
}

/**
 * The named database operations, one file each under src/storage/. Every one runs unchanged on
 * SQLite and PostgreSQL; what differs lives in src/database/dialect.ts. Times are epoch ms passed in
 * by the caller, so tests and peers agree on one clock per call.
 */
export class Storage {
  readonly #context: StorageContext;

  constructor(database: Pick<Database, 'db' | 'adapter'> & Partial<Pick<Database, 'keyring'>>) {
    this.#context = { db: database.db, adapter: database.adapter, keyring: database.keyring ?? Keyring.none };
  }

  createTaskInstance(fields: NewTaskInstance, now = Date.now()): Promise<number | null> {
    return createTaskInstance(this.#context, fields, now);
  }

  readTaskInstance(by: Parameters<typeof readTaskInstance>[1]): ReturnType<typeof readTaskInstance> {
    return readTaskInstance(this.#context, by);
  }

  /** A row's next_kwargs with its event, decrypted with this storage's keys (see sealed-values.ts). */
  openNextKwargs(taskInstanceId: number, nextKwargs: StoredValue | null, nextEvent: StoredValue | null): OpenedNextKwargs {
    return openNextKwargs(this.#context.keyring, taskInstanceId, nextKwargs, nextEvent);
  }

  /** A task instance's reschedules, oldest first: of one try, or (tryNumber null) of all. */
  taskReschedules(taskInstanceId: number, tryNumber: number | null): Promise<TaskReschedule[]> {
    return taskReschedules(this.#context, taskInstanceId, tryNumber);
  }

  /** DAG runs' states and some of their task instances' (what ExternalTaskSensor waits on); missing runs left out. */
  readDagRunStates(keys: readonly DagRunStatesKey[]): Promise<DagRunStates[]> {
    return readDagRunStates(this.#context, keys);
  }

  /** Sends a signal (value as JSON text): returns its version. */
  sendSignal(key: string, valueJson: string, now = Date.now()): Promise<number> {
    return sendSignal(this.#context, key, valueJson, now);
  }

  latestSignalVersions(keys: readonly string[]): Promise<Map<string, number>> {
    return latestSignalVersions(this.#context, keys);
  }

  signalsAfter(after: ReadonlyMap<string, number>, limit: number): Promise<Signal[]> {
    return signalsAfter(this.#context, after, limit);
  }

  pruneSignals(before: number): Promise<number> {
    return pruneSignals(this.#context, before);
  }

  registerJob(fields: JobFields, now = Date.now()): Promise<number> {
    return registerJob(this.#context, fields, now);
  }

  heartbeat(jobId: number, now = Date.now()): Promise<void> {
    return heartbeatJob(this.#context, jobId, now);
  }

  endJob(jobId: number, state: 'success' | 'failed', now = Date.now()): Promise<void> {
    return endJob(this.#context, jobId, state, now);
  }

  releaseTriggersOfDeadTriggerers(aliveSince: number): Promise<number> {
    return releaseTriggersOfDeadTriggerers(this.#context, aliveSince);
  }

  releaseTriggersOfMissingTriggerers(): Promise<number> {
    return releaseTriggersOfMissingTriggerers(this.#context);
  }

  claimTriggers(jobId: number, limit: number): Promise<ClaimResult> {
    return claimTriggers(this.#context, jobId, limit);
  }

  listQuarantinedTriggers(limit: number): Promise<QuarantinedTrigger[]> {
    return listQuarantinedTriggers(this.#context, limit);
  }

  listOwnedTriggerIds(jobId: number): Promise<number[]> {
    return listOwnedTriggerIds(this.#context, jobId);
  }

  existingTriggerIds(ids: readonly number[]): Promise<number[]> {
    return existingTriggerIds(this.#context, ids);
  }

  ownedTriggersDigest(jobId: number): Promise<OwnedDigest> {
    return ownedTriggersDigest(this.#context, jobId);
  }

  loadOwnedTriggers(jobId: number, ids: readonly number[]): Promise<TriggerRow[]> {
    return loadOwnedTriggers(this.#context, jobId, ids);
  }

  releaseOwnedTriggers(jobId: number): Promise<number> {
    return releaseOwnedTriggers(this.#context, jobId);
  }

  /**
   * Events (or failures) made ready to submit: their values sealed now, a large batch on another
   * thread, so the batch after the one being written is ready when that write ends.
   */
  prepareEvents(events: readonly TriggerEventRecord[]): PreparedMove {
    return prepareMove(
      this.#context,
      events.map((event) => ({ triggerId: event.triggerId, json: event.payloadJson, endState: event.endState ?? null })),
      'event',
    );
  }

  prepareFailures(failures: readonly TriggerFailureRecord[]): PreparedMove {
    return prepareMove(
      this.#context,
      failures.map((failure) => ({ triggerId: failure.triggerId, json: JSON.stringify(failure.failure) })),
      'failure',
    );
  }

  /** Moves the task instances of prepared events or failures (see move-deferred-task-instances.ts). */
  submitPrepared(prepared: PreparedMove, now = Date.now()): Promise<MoveResult> {
    return moveDeferredTaskInstances(this.#context, prepared, now);
  }

  submitEvents(events: readonly TriggerEventRecord[], now = Date.now()): Promise<MoveResult> {
    return this.submitPrepared(this.prepareEvents(events), now);
  }

  submitFailures(failures: readonly TriggerFailureRecord[], now = Date.now()): Promise<MoveResult> {
    return this.submitPrepared(this.prepareFailures(failures), now);
  }

  /** Deletes the given triggers (or, without ids, any) that no task instance points at. */
  cleanUnusedTriggers(triggerIds?: readonly number[]): Promise<number> {
    return deleteUnusedTriggers(this.#context, triggerIds);
  }

  failTimedOutDeferrals(now = Date.now()): Promise<number> {
    return failTimedOutDeferrals(this.#context, now);
  }

  nextDeferralDeadline(): Promise<number | null> {
    return nextDeferralDeadline(this.#context);
  }

  claimTaskInstances(worker: WorkerIdentity, limit: number, now = Date.now()): Promise<ClaimedTaskInstance[]> {
    return claimTaskInstances(this.#context, worker, limit, now);
  }

  claimedButNotHeld(workerJobId: number, held: readonly number[]): Promise<ClaimedTaskInstance[]> {
    return claimedButNotHeld(this.#context, workerJobId, held);
  }

  startTaskInstance(taskInstanceId: number, workerJobId: number, executionTimeoutMs: number | null, now = Date.now()): Promise<StartedTaskInstance | null> {
    return startTaskInstance(this.#context, taskInstanceId, workerJobId, executionTimeoutMs, now);
  }

  finishTaskInstance(taskInstanceId: number, held: HeldTry, outcome: TaskOutcome, now = Date.now()): Promise<boolean> {
    return finishTaskInstance(this.#context, taskInstanceId, held, outcome, now);
  }

  handBackTaskInstance(taskInstanceId: number, workerJobId: number, now = Date.now()): Promise<boolean> {
    return handBackTaskInstance(this.#context, taskInstanceId, workerJobId, now);
  }

  checkHeldTries(tries: ReadonlyMap<number, HeldTry>): Promise<Map<number, HeldTryNews>> {
    return checkHeldTries(this.#context, tries);
  }

  carryOutStopRequest(taskInstanceId: number, held: HeldTry, now = Date.now()): Promise<StopRequest | null> {
    return carryOutStopRequest(this.#context, taskInstanceId, held, now);
  }

  pendingSignalActions(limit: number): Promise<PendingSignalAction[]> {
    return pendingSignalActions(this.#context, limit);
  }

  applySignalAction(pending: PendingSignalAction, plan: PlanToApply, now = Date.now()): Promise<SignalActionOutcome> {
    return applySignalAction(this.#context, pending, plan, now);
  }

  startOnSignal(taskInstanceId: number, starts: readonly SignalStart[], now = Date.now()): Promise<boolean> {
    return startOnSignal(this.#context, taskInstanceId, starts, now);
  }

  recordSignalStarts(taskInstanceId: number, starts: readonly SignalStart[]): Promise<void> {
    return recordSignalStarts(this.#context, taskInstanceId, starts);
  }

  readActedSignal(taskInstanceId: number, key: string): Promise<ActedSignal | null> {
    return readActedSignal(this.#context, taskInstanceId, key);
  }

  clearTaskInstances(taskInstances: readonly TaskInstanceToClear[], now = Date.now()): Promise<ClearResult> {
    return clearTaskInstances(this.#context, taskInstances, now);
  }

  createDagRun(dag: SchedulerDag, run: NewDagRun, now = Date.now()): Promise<number | null> {
    return createDagRun(this.#context, dag, run, now);
  }

  listUnfinishedDagRuns(limit: number): Promise<UnfinishedDagRun[]> {
    return listUnfinishedDagRuns(this.#context, limit);
  }

  runNeedsDecisions(dagId: string, runId: string, finishedStates: readonly TaskInstanceState[]): Promise<boolean> {
    return runNeedsDecisions(this.#context, dagId, runId, finishedStates);
  }

  taskInstancesOfRun(dagId: string, runId: string): Promise<RunTaskInstance[]> {
    return taskInstancesOfRun(this.#context, dagId, runId);
  }

  decideTaskInstances(ids: readonly number[], state: 'scheduled' | 'skipped' | 'upstream_failed' | 'failed', now = Date.now()): Promise<number[]> {
    return decideTaskInstances(this.#context, ids, state, now);
  }

  setDagRunState(dagRunId: number, from: DagRunState, to: DagRunState, now = Date.now()): Promise<boolean> {
    return setDagRunState(this.#context, dagRunId, from, to, now);
  }

  latestScheduledLogicalDate(dagId: string): Promise<number | null> {
    return latestScheduledLogicalDate(this.#context, dagId);
  }

  latestSignalRunVersion(dagId: string): Promise<number | null> {
    return latestSignalRunVersion(this.#context, dagId);
  }

  signalScheduleStart(dagId: string, key: string): Promise<number> {
    return signalScheduleStart(this.#context, dagId, key);
  }

  appendTaskLogLines(lines: readonly TaskLogLine[]): Promise<void> {
    return appendTaskLogLines(this.#context, lines);
  }

  appendTriggerLogLines(lines: readonly TriggerLogLine[]): Promise<void> {
    return appendTriggerLogLines(this.#context, lines);
  }

  readTaskLog(taskInstanceId: number, tryNumber: number): Promise<StoredLogLine[]> {
    return readTaskLog(this.#context, taskInstanceId, tryNumber);
  }

  taskLogTries(taskInstanceId: number): Promise<number[]> {
    return taskLogTries(this.#context, taskInstanceId);
  }

  /** The trigger rows of `classpath` (the signal trigger's) with their deferred task instances, kwargs opened. */
  signalTriggerWaits(classpath: string): Promise<SignalTriggerWait[]> {
    return signalTriggerWaits(this.#context, classpath);
  }

  /** The task instances of unfinished runs with a signal action on `key`. */
  countSignalActionTasks(key: string): Promise<number> {
    return countSignalActionTasks(this.#context, key);
  }

  /** Every key a task instance of an unfinished run has a signal action on. */
  signalActionKeys(): Promise<string[]> {
    return signalActionKeys(this.#context);
  }

  /** The last error line of each given try's log (why it failed), by task instance id. */
  tryErrors(tries: readonly { readonly id: number; readonly tryNumber: number }[]): Promise<Map<number, TryError>> {
    return tryErrors(this.#context, tries);
  }

  taskInstancesOfRunId(runId: string, dagId?: string): Promise<TaskInstanceOfRunId[]> {
    return taskInstancesOfRunId(this.#context, runId, dagId);
  }

  listDagRuns(filter: { dagId?: string; state?: DagRunState; limit: number }): Promise<DagRunRow[]> {
    return listDagRuns(this.#context, filter);
  }

  listTriggers(filter: {
    readonly limit: number;
    readonly triggererId?: number;
    readonly perTrigger: number;
    readonly afterId?: number;
  }): Promise<TriggerListing[]> {
    return listTriggers(this.#context, filter);
  }

  ownedTriggerCounts(triggererIds: readonly number[]): Promise<Map<number, number>> {
    return ownedTriggerCounts(this.#context, triggererIds);
  }

  listDeferredTaskInstances(page: { readonly limit: number; readonly afterId?: number; readonly dagId?: string }): Promise<DeferredTaskInstance[]> {
    return listDeferredTaskInstances(this.#context, page);
  }

  cleanDatabase(before: number, dryRun: boolean): Promise<CleanCounts> {
    return cleanDatabase(this.#context, before, dryRun);
  }

  /**
   * Refuses (DF_ENCRYPTION_KEY_MISMATCH) a key whose id the database knows under other material,
   * and records the keys it does not know yet; every daemon and `db rotate-key` before writing.
   */
  verifyEncryptionKeys(now: number): Promise<void> {
    return verifyEncryptionKeys(this.#context, now);
  }

  /** Re-encrypts every secret-bearing value with the first key (`db rotate-key`). */
  resealValues(): Promise<ResealCounts> {
    return resealValues(this.#context);
  }

  /** Deferred task instances and unfinished DAG runs by state (for the metrics gauges). */
  countWaitingWork(): Promise<WaitingWorkCounts> {
    return countWaitingWork(this.#context);
  }

  countTriggers(): Promise<number> {
    return countTriggers(this.#context);
  }

  listJobs(filter: JobFilter): Promise<JobListing[]> {
    return listJobs(this.#context, filter);
  }

  findDagRun(dagId: string, runId: string): Promise<{ id: number; state: DagRunState } | null> {
    return findDagRun(this.#context, dagId, runId);
  }

  readResumeState(taskInstanceId: number): Promise<{ state: string | null; nextMethod: string | null; nextKwargsJson: string | null } | null> {
    return readResumeState(this.#context, taskInstanceId);
  }

  readReturnValue(dagId: string, runId: string, taskId: string): Promise<string | null> {
    return readReturnValue(this.#context, dagId, runId, taskId);
  }

  listSerializedDags(): Promise<{ dagId: string; fileloc: string; dataJson: string }[]> {
    return listSerializedDags(this.#context);
  }

  /** A DAG's stored JSON (text), hash and file; null when deleted or unknown. */
  readSerializedDag(dagId: string): Promise<{ data: string; hash: string; fileloc: string } | null> {
    return readSerializedDag(this.#context, dagId);
  }

  listImportErrors(): Promise<{ fileloc: string; message: string }[]> {
    return listImportErrors(this.#context);
  }

  listActiveDags(): Promise<{ dagId: string; hash: string }[]> {
    return listActiveDags(this.#context);
  }

  runProgress(dagId: string, runId: string): Promise<RunProgress | null> {
    return runProgress(this.#context, dagId, runId);
  }

  finishedTaskMs(dagId: string, runId: string): Promise<number> {
    return finishedTaskMs(this.#context, dagId, runId);
  }

  reapZombieTaskInstances(aliveSince: number, now: number, retryReadyAt: (zombie: ZombieTry) => Promise<number>): Promise<ReapResult> {
    return reapZombieTaskInstances(this.#context, aliveSince, now, retryReadyAt);
  }

  /** The earliest moment a waiting (retry, reschedule) task instance becomes ready; null when none waits. */
  nextReadyAt(): Promise<number | null> {
    return nextReadyAt(this.#context);
  }

  scheduleReadyTaskInstances(now = Date.now()): Promise<number> {
    return scheduleReadyTaskInstances(this.#context, now);
  }

  /** `held`: a worker deferring the try it runs, which must still be its own (see HeldTry); without it, any deferrable task instance (the API). */
  deferTaskInstance(taskInstanceId: number, deferral: Deferral, now = Date.now(), held?: HeldTry): Promise<DeferResult> {
    return deferTaskInstance(this.#context, taskInstanceId, deferral, now, held);
  }
}
