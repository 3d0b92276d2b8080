/**
 * deferflow's lower level, for a process that wires deferflow itself and for tools that read
 * its tables: the daemon classes and their options, the trigger registry, DAG processing, the
 * database's schema and row types, migrations and logging. Less stable than `deferflow`: a minor
 * version may change it, and its API report (docs/api/deferflow-internals.api.md) says how.
 *
 * @packageDocumentation
 */
export { TriggerRegistry } from './authoring/triggers/registry.ts';
export { SensorPokeTrigger, type SensorPokeKwargs } from './authoring/sensors/sensor-poke-trigger.ts';
export { SignalService } from './services/signals/signal-service.ts';
export { parseDatabaseUrl, DEFAULT_DATABASE_URL } from './database/database-url.ts';
export { migrateToLatest } from './database/migrate.ts';
export { TRIGGER_FAILURE_METHOD, type FailureKwargs } from './model/failure-marker.ts';
export {
  fromDbTime,
  toDbTime,
  DAG_RUN_STATES,
  TASK_INSTANCE_STATES,
  type DatabaseSchema,
  type DagRunTable,
  type ImportErrorTable,
  type JobTable,
  type SerializedDagTable,
  type TaskInstanceTable,
  type TaskLogTable,
  type TaskRescheduleTable,
  type TriggerTable,
} from './database/schema.ts';
export type { DagRunRow, ImportErrorRow, JobRow, SerializedDagRow, TaskInstanceRow, TaskLogRow, TaskRescheduleRow, TriggerTableRow } from './database/rows.ts';
export { createLogger } from './vocabulary/logging.ts';
export { canonicalJson } from './vocabulary/serialization/json.ts';
export type { DaemonRuntime } from './services/jobs/daemon.ts';
export {
  Tracing,
  traceIdsOf,
  type TracedTaskInstance,
  type TraceIds,
  type TrySpan,
  type TriggerRunSpan,
  type TracingConfig,
} from './services/observability/tracing.ts';
export { systemClock, type Clock } from './vocabulary/time/clock.ts';
export { Triggerer } from './daemons/triggerer/triggerer.ts';
export type { ResolvedCommonOptions, TracesExporter } from './daemons/common-options.ts';
export { resolveTriggererOptions, TRIGGERER_OPTIONS, type TriggererOptions } from './daemons/triggerer/options.ts';
export { Worker, type TaskResolver, type WorkerOptions } from './daemons/worker/worker.ts';
export { resolveWorkerOptions, WORKER_OPTIONS, type ResolvedWorkerOptions } from './daemons/worker/options.ts';
export { dagFileResolver } from './daemons/worker/dag-file-resolver.ts';
export { Scheduler, type SchedulerOptions } from './daemons/scheduler/scheduler.ts';
export { resolveSchedulerOptions, SCHEDULER_OPTIONS, type ResolvedSchedulerOptions } from './daemons/scheduler/options.ts';
export { serializedDagSource, processDagFolder } from './services/dags/dag-processor.ts';
export { loadDagFolder, type DagFolder, type DagFileError, type LoadedDag } from './authoring/dags/loader.ts';
export type { DagSource, SchedulerDag } from './model/scheduler-dag.ts';
export { triggerDagRun, type ManualRunOptions } from './services/dags/manual-run.ts';
export { resolveDeferflowConfig } from './app/config.ts';
