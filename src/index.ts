/**
 * deferflow: deferrable tasks and a triggerer daemon. This entry is what DAG and trigger authors
 * and embedders use: operators, triggers, sensors, `Dag`, events, errors, signals, and
 * `deferflow({...})` with its options. The daemon classes, storage and table types are in
 * `deferflow/internals`. Its API report is docs/api/deferflow.api.md.
 *
 * @packageDocumentation
 */
export { BaseTrigger, type SerializedTrigger, type TriggerClass } from './authoring/triggers/base-trigger.ts';
export { TaskEndEvent, TaskFailedEvent, TaskSkippedEvent, TaskSuccessEvent, TriggerEvent, type TaskEndState } from './authoring/triggers/trigger-event.ts';
export { nowPlusPlaceholder } from './authoring/triggers/start-trigger-kwargs.ts';
export {
  BaseOperator,
  chain,
  type AnyOperator,
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
export type { TaskReschedule } from './model/task-reschedule.ts';
export type { DagRunStates, DagRunStatesQuery } from './model/dag-run-states.ts';
export { CONNECTION_ENV_PREFIX, connectionFromEnv, listConnections, maskConnectionUrl, type Connection } from './authoring/connections/connections.ts';
export { isTruthyCell, queryFirstCell } from './authoring/connections/sql-connection.ts';
export { MAX_SIGNAL_KEY_LENGTH, MAX_SIGNAL_VALUE_BYTES, checkSignalKey, type Signal } from './model/signal.ts';
export {
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
export type { DagRunState, TaskInstanceState } from './database/schema.ts';
export type { Logger, LogFormat, LogLevel } from './vocabulary/logging.ts';
export type { JsonValue, JsonObject } from './vocabulary/serialization/json.ts';
export type { DurationInput } from './vocabulary/time/duration.ts';
export * from './vocabulary/errors.ts';
export { deferflow, Deferflow } from './app/deferflow.ts';
export type { DeferflowConfig, DeferflowOptions, SchedulerConfig, TriggererConfig, WorkerConfig } from './app/config.ts';

// This module, deferflow/internals and the built-in triggers' are the ones a DAG file or trigger
// module importing deferflow gets (not a second copy of the library): see shareWithUserCode.
import * as publicApi from './index.ts';
import * as internals from './internals.ts';
import * as builtinTriggers from '../triggers/index.ts';
import { shareWithUserCode } from './authoring/user-code/shared-modules.ts';

const extension = import.meta.url.endsWith('.ts') ? '.ts' : '.js';
shareWithUserCode(import.meta.url, publicApi);
shareWithUserCode(new URL(`./internals${extension}`, import.meta.url).href, internals);
shareWithUserCode(new URL(`../triggers/index${extension}`, import.meta.url).href, builtinTriggers);
