import { Keyring } from '../database/encryption/keyring.ts';
import type { Database } from '../database/connect.ts';
import type { StorageContext } from './context.ts';
import { TriggerStore } from './trigger-store.ts';
import { TaskInstanceStore } from './task-instance-store.ts';
import { DagRunStore } from './dag-run-store.ts';
import { SignalStore } from './signal-store.ts';
import { JobStore } from './job-store.ts';
import { LogStore } from './log-store.ts';
import { SerializedDagStore } from './serialized-dag-store.ts';
import { MaintenanceStore } from './maintenance-store.ts';
import { InputStore } from './input-store.ts';
import { AuditStore } from './audit-store.ts';

export type { ClaimResult, TriggerRow } from './claim-triggers.ts';
export type { OwnedDigest } from './owned-triggers.ts';
export type { MoveResult, PreparedMove } from './move-deferred-task-instances.ts';
export type { Deferral, DeferResult } from './defer-task-instance.ts';
export type { JobFields, JobHolder, JobLiveness } from './jobs.ts';
export type { TriggerOwnership } from './trigger-owners.ts';
export type { NewDagRun } from './create-dag-run.ts';
export type { NewTaskInstance } from './create-task-instance.ts';
export type { TaskReschedule } from '../model/task-reschedule.ts';
export type { ClearOptions, ClearResult, TaskInstanceToClear } from './clear-task-instances.ts';
export type { MarkedState, MarkResult } from './mark-task-instances.ts';
export type { AuditEntry, AuditRecord } from './audit-log.ts';
export type { DaemonSample } from './daemon-samples.ts';
export type { GridCell } from './task-instance-grid.ts';
export type { StateChange } from './task-instance-history.ts';
export type { TaskStateEntry, TaskStateWrite } from './task-state.ts';
export type { RunTaskInstance, UnfinishedDagRun } from './dag-run-progress.ts';
export type { ReapResult, ZombieTry } from './reap-zombie-task-instances.ts';
export type { PendingSignalAction, PlanToApply, SignalActionOutcome } from './signal-actions.ts';
export type { TriggerListing } from './list-triggers.ts';
export type { CleanCounts } from './clean-database.ts';
export type { RunProgress } from './run-progress.ts';
export type { DagRunRow } from './list-dag-runs.ts';
export type { JobListing, JobRowLiveness } from './list-jobs.ts';
export type { QueueServer, QueueWork } from './queue-work.ts';
export type { WatchBatch, WatchBatchResult } from './record-watch-events.ts';
export type { DagWatcherListing } from './list-dag-watchers.ts';
export type { TaskLogLine, TriggerLogLine } from './append-task-log-lines.ts';
export type { StoredLogLine } from './read-task-log.ts';
export type { QuarantinedTrigger } from './quarantine-triggers.ts';
export type { DeferredTaskInstance } from './list-deferred-task-instances.ts';
export type { TaskInstanceOfRunId } from './task-instances-of-run-id.ts';
export type { ClaimedTaskInstance, StartedTaskInstance, TaskOutcome, WorkerIdentity } from './task-instance-transitions.ts';
export type { HeldTry } from './held-try.ts';
export type { HeldTryNews } from './check-held-tries.ts';
export type { TriggerStore, TaskInstanceStore, DagRunStore, SignalStore, JobStore, LogStore, SerializedDagStore, MaintenanceStore, InputStore, AuditStore };
export type { AskedInput, AskResult } from './ask-for-input.ts';
export type { AwaitInputResult } from './await-input.ts';
export type { GivenResponse } from './respond-to-input.ts';
export type { TaskInput } from './read-task-input.ts';
export type { InputTimeouts } from './time-out-awaited-input.ts';
export { TRIGGER_FAILURE_METHOD, type FailureKwargs } from './context.ts';
export { signalRunId } from './latest-scheduled-run.ts';

export type { TriggerEventOutcome, TriggerFailureOutcome, TriggerOutcome } from './trigger-store.ts';

/**
 * The stores of deferflow's database, one per aggregate, each method a named operation (one file
 * each under src/storage/). Every one runs unchanged on SQLite and PostgreSQL; what differs lives
 * in src/database/dialect.ts. Times are epoch ms passed in by the caller, so tests and peers agree
 * on one clock per call. A daemon keeps the stores it uses (its type says which).
 */
export interface Stores {
  readonly triggers: TriggerStore;
  readonly taskInstances: TaskInstanceStore;
  readonly dagRuns: DagRunStore;
  readonly signals: SignalStore;
  readonly jobs: JobStore;
  readonly logs: LogStore;
  readonly serializedDags: SerializedDagStore;
  readonly maintenance: MaintenanceStore;
  readonly inputs: InputStore;
  readonly audit: AuditStore;
}

/** The stores of an open database (its keyring opens and seals values; none: plain values only). */
export function openStores(database: Pick<Database, 'db' | 'adapter'> & Partial<Pick<Database, 'keyring'>>): Stores {
  const context: StorageContext = { db: database.db, adapter: database.adapter, keyring: database.keyring ?? Keyring.none };
  return {
    triggers: new TriggerStore(context),
    taskInstances: new TaskInstanceStore(context),
    dagRuns: new DagRunStore(context),
    signals: new SignalStore(context),
    jobs: new JobStore(context),
    logs: new LogStore(context),
    serializedDags: new SerializedDagStore(context),
    maintenance: new MaintenanceStore(context),
    inputs: new InputStore(context),
    audit: new AuditStore(context),
  };
}
