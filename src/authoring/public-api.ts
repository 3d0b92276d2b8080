/**
 * The part of `deferflow` (src/index.ts) that DAG files, operators, triggers and sensors are
 * written with: everything it exports but what opens or uses a database (those load kysely and
 * the drivers). A task runner process shares this with the DAG files it loads instead of the
 * whole entry, and loads the rest on first use (see user-code/task-runner-api.ts): it starts in a
 * fraction of the time and memory.
 */
export { BaseTrigger, type SerializedTrigger, type TriggerClass } from './triggers/base-trigger.ts';
export {
  probeOf,
  type UpstreamContext,
  type UpstreamFilter,
  type UpstreamMessage,
  type UpstreamSource,
  type UpstreamSubscription,
} from './triggers/upstream-hub.ts';
export {
  TaskEndEvent,
  TaskFailedEvent,
  TaskSkippedEvent,
  TaskSuccessEvent,
  TriggerEvent,
  WatchEvents,
  type TaskEndState,
  type WatchedEvent,
} from './triggers/trigger-event.ts';
export { nowPlusPlaceholder } from './triggers/start-trigger-kwargs.ts';
export { AllOfTrigger, AnyOfTrigger, CompositeTrigger, MAX_COMPOSITE_LEAVES, allOf, anyOf } from './triggers/composite-trigger.ts';
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
  type AskedQuestion,
  type AwaitingInputNotice,
  type InputRequest,
  type OnAwaitingInput,
} from './operators/base-operator.ts';
export {
  ApprovalOperator,
  BranchChoiceOperator,
  InputOperator,
  type ApprovalOptions,
  type BranchChoiceOptions,
  type HumanInputOptions,
  type InputOperatorOptions,
} from './operators/human-input-operators.ts';
export {
  INPUT_FIELD_TYPES,
  INPUT_SOURCES,
  type InputAnswer,
  type InputField,
  type InputFieldType,
  type InputQuestion,
  type InputResponse,
  type InputSource,
} from '../model/human-input.ts';
export { FunctionOperator, type FunctionOperatorOptions } from './operators/function-operator.ts';
export { MAX_TASK_STATE_KEY_LENGTH, MAX_TASK_STATE_VALUE_BYTES, type TaskState } from './operators/task-state.ts';
export { Dag, isDag, type DagOptions } from './dags/dag.ts';
export { TaskDeferred, isTaskDeferred, type DeferralRequest } from './operators/task-deferred.ts';
export {
  BranchResult,
  TaskAwaitingInput,
  TaskFailedWithoutRetry,
  TaskRescheduled,
  TaskSkipped,
  isBranchResult,
  isTaskAwaitingInput,
  isTaskFailedWithoutRetry,
  isTaskRescheduled,
  isTaskSkipped,
} from './operators/task-signals.ts';
export { BaseSensorOperator, SENSOR_MODES, type SensorMode, type SensorOptions, type SmartSensors } from './sensors/base-sensor.ts';
export { PokeReturnValue, isPokeReturnValue } from './sensors/poke-result.ts';
export { isSensorClass, type PokeContext, type SensorClass } from './sensors/sensor-class.ts';
export type { TaskReschedule } from '../model/task-reschedule.ts';
export type { DagRunStates, DagRunStatesQuery } from '../model/dag-run-states.ts';
export { CONNECTION_ENV_PREFIX, connectionFromEnv, listConnections, maskConnectionUrl, type Connection } from './connections/connections.ts';
export { isTruthyCell, queryFirstCell } from './connections/sql-connection.ts';
export { MAX_SIGNAL_KEY_LENGTH, MAX_SIGNAL_VALUE_BYTES, checkSignalKey, type Signal } from '../model/signal.ts';
export { SignalTrigger, type SignalEvent, type SignalTriggerKwargs } from './triggers/signal-trigger.ts';
export type { ActedSignal, StartCondition, StopEndState } from '../model/signal-actions.ts';
export { Keyring } from '../database/encryption/keyring.ts';
export type { DagRunState, TaskInstanceState } from '../database/schema.ts';
export type { Logger, LogFormat, LogLevel } from '../vocabulary/logging.ts';
export type { JsonValue, JsonObject } from '../vocabulary/serialization/json.ts';
export type { DurationInput } from '../vocabulary/time/duration.ts';
export * from '../vocabulary/errors.ts';
