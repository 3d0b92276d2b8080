import type { StoredValue } from '../database/encryption/keyring.ts';
import type { StorageContext } from './context.ts';
import { deferTaskInstance, type Deferral, type DeferResult } from './defer-task-instance.ts';
import { nextReadyAt, scheduleReadyTaskInstances } from './schedule-ready-task-instances.ts';
import { clearTaskInstances, type ClearOptions, type ClearResult, type TaskInstanceToClear } from './clear-task-instances.ts';
import { markTaskInstances, type MarkedState, type MarkResult } from './mark-task-instances.ts';
import { listTaskState, readTaskStateValue, writeTaskState, type TaskStateEntry, type TaskStateWrite } from './task-state.ts';
import { listTaskHolders, reapZombieTaskInstances, type ReapResult, type ZombieTry } from './reap-zombie-task-instances.ts';
import { readResumeState, readReturnValue } from './read-task-instance-values.ts';
import { createTaskInstance, type NewTaskInstance } from './create-task-instance.ts';
import { readTaskInstance } from './read-task-instance.ts';
import type { TaskReschedule } from '../model/task-reschedule.ts';
import { taskReschedules } from './task-reschedules.ts';
import { carryOutStopRequest } from './stop-requests.ts';
import { checkHeldTries, type HeldTryNews } from './check-held-tries.ts';
import type { StopRequest } from '../database/schema.ts';
import { listDeferredTaskInstances, type DeferredTaskInstance } from './list-deferred-task-instances.ts';
import { heldTaskInstanceCounts } from './held-task-instance-counts.ts';
import { taskInstanceGrid, type GridCell } from './task-instance-grid.ts';
import { listStateChanges, type StateChange } from './task-instance-history.ts';
import { openNextKwargs, type OpenedNextKwargs } from './sealed-values.ts';
import { taskInstancesOfRunId, type TaskInstanceOfRunId } from './task-instances-of-run-id.ts';
import { tryErrors, type TryError } from './try-errors.ts';
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
import type { JobHolder } from './jobs.ts';

/** Task instances: createTaskInstance, readTaskInstance, openNextKwargs, taskReschedules, claimTaskInstances, claimedButNotHeld, startTaskInstance, finishTaskInstance, handBackTaskInstance, checkHeldTries, carryOutStopRequest, deferTaskInstance, clearTaskInstances, markTaskInstances, readTaskStateValue, listTaskState, writeTaskState, listTaskHolders, reapZombieTaskInstances, nextReadyAt, scheduleReadyTaskInstances, readResumeState, readReturnValue, tryErrors, taskInstancesOfRunId, listDeferredTaskInstances, heldTaskInstanceCounts, taskInstanceGrid, listStateChanges. */
export class TaskInstanceStore {
  readonly #context: StorageContext;

  constructor(context: StorageContext) {
    this.#context = context;
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

  claimTaskInstances(
    worker: WorkerIdentity,
    limit: number,
    now = Date.now(),
    options: Parameters<typeof claimTaskInstances>[4] = {},
  ): Promise<ClaimedTaskInstance[]> {
    return claimTaskInstances(this.#context, worker, limit, now, options);
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

  /** `held`: a worker deferring the try it runs, which must still be its own (see HeldTry); without it, any deferrable task instance (the API). */
  deferTaskInstance(taskInstanceId: number, deferral: Deferral, now = Date.now(), held?: HeldTry): Promise<DeferResult> {
    return deferTaskInstance(this.#context, taskInstanceId, deferral, now, held);
  }

  clearTaskInstances(taskInstances: readonly TaskInstanceToClear[], options: ClearOptions = {}, now = Date.now()): Promise<ClearResult> {
    return clearTaskInstances(this.#context, taskInstances, options, now);
  }

  markTaskInstances(taskInstanceIds: readonly number[], state: MarkedState, now = Date.now()): Promise<MarkResult> {
    return markTaskInstances(this.#context, taskInstanceIds, state, now);
  }

  /** One key of a task instance's durable state (JSON text), or null. */
  readTaskStateValue(taskInstanceId: number, key: string): Promise<string | null> {
    return readTaskStateValue(this.#context, taskInstanceId, key);
  }

  /** Every key of a task instance's durable state. */
  listTaskState(taskInstanceId: number): Promise<TaskStateEntry[]> {
    return listTaskState(this.#context, taskInstanceId);
  }

  /** Sets (JSON text) or deletes (null) a key of the state of a task instance while `held` runs it; nothing otherwise (see TaskStateWrite). */
  writeTaskState(write: Parameters<typeof writeTaskState>[1], now = Date.now()): Promise<TaskStateWrite> {
    return writeTaskState(this.#context, write, now);
  }

  listTaskHolders(): Promise<JobHolder[]> {
    return listTaskHolders(this.#context);
  }

  reapZombieTaskInstances(deadWorkerIds: readonly number[], now: number, retryReadyAt: (zombie: ZombieTry) => Promise<number>): Promise<ReapResult> {
    return reapZombieTaskInstances(this.#context, deadWorkerIds, now, retryReadyAt);
  }

  /** The earliest moment a waiting (retry, reschedule) task instance becomes ready; null when none waits. */
  nextReadyAt(): Promise<number | null> {
    return nextReadyAt(this.#context);
  }

  scheduleReadyTaskInstances(now = Date.now()): Promise<number> {
    return scheduleReadyTaskInstances(this.#context, now);
  }

  readResumeState(taskInstanceId: number): Promise<{ state: string | null; nextMethod: string | null; nextKwargsJson: string | null } | null> {
    return readResumeState(this.#context, taskInstanceId);
  }

  readReturnValue(dagId: string, runId: string, taskId: string): Promise<string | null> {
    return readReturnValue(this.#context, dagId, runId, taskId);
  }

  /** The last error line of each given try's log (why it failed), by task instance id. */
  tryErrors(tries: readonly { readonly id: number; readonly tryNumber: number }[]): Promise<Map<number, TryError>> {
    return tryErrors(this.#context, tries);
  }

  taskInstancesOfRunId(runId: string, dagId?: string): Promise<TaskInstanceOfRunId[]> {
    return taskInstancesOfRunId(this.#context, runId, dagId);
  }

  listDeferredTaskInstances(page: { readonly limit: number; readonly afterId?: number; readonly dagId?: string }): Promise<DeferredTaskInstance[]> {
    return listDeferredTaskInstances(this.#context, page);
  }

  heldTaskInstanceCounts(workerIds: readonly number[]): Promise<Map<number, number>> {
    return heldTaskInstanceCounts(this.#context, workerIds);
  }

  taskInstanceGrid(dagId: string, runIds: readonly string[]): Promise<GridCell[]> {
    return taskInstanceGrid(this.#context, dagId, runIds);
  }

  listStateChanges(taskInstanceIds: readonly number[]): Promise<StateChange[]> {
    return listStateChanges(this.#context, taskInstanceIds);
  }
}
