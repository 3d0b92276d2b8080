// deferflow's public API. Triggers: BaseTrigger + TriggerEvent; operators: BaseOperator.defer()
// throwing TaskDeferred; persistence: deferTaskInstance / resumeTaskInstance and the task
// instances they work on; embedding: deferflow({...}), or the Worker, Scheduler and Triggerer.
export { BaseTrigger, type SerializedTrigger, type TriggerClass } from './authoring/triggers/base-trigger.ts';
export { TaskEndEvent, TaskFailedEvent, TaskSkippedEvent, TaskSuccessEvent, TriggerEvent, type TaskEndState } from './authoring/triggers/trigger-event.ts';
export { TriggerRegistry } from './authoring/triggers/registry.ts';
export { nowPlusPlaceholder } from './authoring/triggers/start-trigger-kwargs.ts';
export {
  BaseOperator,
  chain,
  type RuntimeContext,
  type TaskContext,
  type TaskDefaults,
  type TaskInstanceRef,
  type TaskOptions,
  type TaskOrTasks,
  type StartTriggerOptions,
  type SignalActionOptions,
} from './authoring/operators/base-operator.ts';
export { FunctionOperator, type FunctionOperatorOptions } from './authoring/operators/function-operator.ts';
export { Dag, isDag, type DagOptions } from './authoring/dags/dag.ts';
export { TaskDeferred, isTaskDeferred, type DeferralRequest } from './authoring/operators/task-deferred.ts';
export {
  TaskFailedWithoutRetry,
  TaskRescheduled,
  TaskSkipped,
  isTaskFailedWithoutRetry,
  isTaskRescheduled,
  isTaskSkipped,
} from './authoring/operators/task-signals.ts';
export { BaseSensorOperator, SENSOR_MODES, type SensorMode, type SensorOptions, type SmartSensors } from './authoring/sensors/base-sensor.ts';
export { PokeReturnValue, isPokeReturnValue } from './authoring/sensors/poke-result.ts';
export { isSensorClass, type PokeContext, type SensorClass } from './authoring/sensors/sensor-class.ts';
export { SensorPokeTrigger, type SensorPokeKwargs } from './authoring/sensors/sensor-poke-trigger.ts';
export type { TaskReschedule } from './model/task-reschedule.ts';
export type { DagRunStates, DagRunStatesQuery } from './model/dag-run-states.ts';
export { CONNECTION_ENV_PREFIX, connectionFromEnv, listConnections, maskConnectionUrl, type Connection } from './authoring/connections/connections.ts';
export { isTruthyCell, queryFirstCell } from './authoring/connections/sql-connection.ts';
export { MAX_SIGNAL_KEY_LENGTH, MAX_SIGNAL_VALUE_BYTES, checkSignalKey, type Signal } from './model/signal.ts';
export {
  SignalService,
  latestSignalVersion,
  listSignals,
  listenSignal,
  sendSignal,
  type SignalListener,
  type SignalServiceOptions,
  type SignalSubscription,
} from './services/signals/signal-service.ts';
export { SignalTrigger, type SignalEvent, type SignalTriggerKwargs } from './authoring/triggers/signal-trigger.ts';
export type { ActedSignal, StartCondition, StopEndState } from './model/signal-actions.ts';
export { deferTaskInstance, resumeTaskInstance } from './services/deferral.ts';
export { createTaskInstance, readTaskInstance, type NewTaskInstanceFields, type TaskInstance } from './services/task-instances.ts';
export { openDatabase, type Database } from './database/connect.ts';
export { Keyring } from './database/encryption/keyring.ts';
export { parseDatabaseUrl, DEFAULT_DATABASE_URL } from './database/database-url.ts';
export { migrateToLatest } from './database/migrate.ts';
export { TRIGGER_FAILURE_METHOD, type FailureKwargs } from './model/failure-marker.ts';
export {
  fromDbTime,
  toDbTime,
  DAG_RUN_STATES,
  TASK_INSTANCE_STATES,
  type DagRunState,
  type DatabaseSchema,
  type DagRunTable,
  type ImportErrorTable,
  type JobTable,
  type SerializedDagTable,
  type TaskInstanceState,
  type TaskInstanceTable,
  type TaskLogTable,
  type TaskRescheduleTable,
  type TriggerTable,
} from './database/schema.ts';
export type { DagRunRow, ImportErrorRow, JobRow, SerializedDagRow, TaskInstanceRow, TaskLogRow, TaskRescheduleRow, TriggerTableRow } from './database/rows.ts';
export { createLogger, type Logger } from './vocabulary/logging.ts';
export type { LogFormat, LogLevel } from './vocabulary/logging.ts';
export { canonicalJson, type JsonValue, type JsonObject } from './vocabulary/serialization/json.ts';
export * from './vocabulary/errors.ts';
export { Triggerer } from './daemons/triggerer/triggerer.ts';
export { resolveTriggererOptions, TRIGGERER_OPTIONS, type TriggererOptions } from './daemons/triggerer/options.ts';
export { Worker, type TaskResolver, type WorkerOptions } from './daemons/worker/worker.ts';
export { resolveWorkerOptions, WORKER_OPTIONS, type ResolvedWorkerOptions } from './daemons/worker/options.ts';
export { dagFileResolver } from './daemons/worker/dag-file-resolver.ts';
export { Scheduler, type SchedulerOptions } from './daemons/scheduler/scheduler.ts';
export { resolveSchedulerOptions, SCHEDULER_OPTIONS, type ResolvedSchedulerOptions } from './daemons/scheduler/options.ts';
export { serializedDagSource, processDagFolder } from './services/dags/dag-processor.ts';
export type { DagSource, SchedulerDag } from './model/scheduler-dag.ts';
export { triggerDagRun, type ManualRunOptions } from './services/dags/manual-run.ts';
export { deferflow, Deferflow } from './app/deferflow.ts';
export {
  resolveDeferflowConfig,
  type DeferflowConfig,
  type DeferflowOptions,
  type DurationInput,
  type SchedulerConfig,
  type TriggererConfig,
  type WorkerConfig,
} from './app/config.ts';

// This module and the built-in triggers' are the ones a DAG file or trigger module importing
// deferflow gets (not a second copy of the library): see shareWithUserCode.
import * as publicApi from './index.ts';
import * as builtinTriggers from '../triggers/index.ts';
import { shareWithUserCode } from './authoring/user-code/shared-modules.ts';

shareWithUserCode(import.meta.url, publicApi);
shareWithUserCode(new URL(`../triggers/index${import.meta.url.endsWith('.ts') ? '.ts' : '.js'}`, import.meta.url).href, builtinTriggers);
