// deferflow's public API. Triggers: BaseTrigger + TriggerEvent; operators: BaseOperator.defer()
// throwing TaskDeferred; persistence: deferTaskInstance / resumeTaskInstance; the daemon: Triggerer.
export { BaseTrigger, type SerializedTrigger, type TriggerClass } from './triggers/base-trigger.ts';
export { TaskEndEvent, TaskFailedEvent, TaskSkippedEvent, TaskSuccessEvent, TriggerEvent, type TaskEndState } from './triggers/trigger-event.ts';
export { TriggerRegistry } from './triggers/registry.ts';
export { nowPlusPlaceholder } from './triggers/start-trigger-kwargs.ts';
export { BaseOperator, chain, type RuntimeContext, type TaskContext, type TaskDefaults, type TaskInstanceRef, type TaskOptions, type TaskOrTasks, type StartTriggerOptions } from './operators/base-operator.ts';
export { FunctionOperator, type FunctionOperatorOptions } from './operators/function-operator.ts';
export { Dag, isDag, type DagOptions } from './dags/dag.ts';
export { TaskDeferred, isTaskDeferred, type DeferralRequest } from './operators/task-deferred.ts';
export { TaskRescheduled, TaskSkipped, isTaskRescheduled, isTaskSkipped } from './operators/task-signals.ts';
export { deferTaskInstance, resumeTaskInstance } from './deferral.ts';
export { openDatabase, type Database } from './db/connect.ts';
export { parseDatabaseUrl, DEFAULT_DATABASE_URL } from './db/database-url.ts';
export { migrateToLatest } from './db/migrate.ts';
export { Storage, TRIGGER_FAILURE_METHOD } from './storage/index.ts';
export { Triggerer } from './triggerer/triggerer.ts';
export { resolveTriggererOptions, TRIGGERER_OPTIONS, type TriggererOptions } from './triggerer/options.ts';
export { createLogger } from './logging.ts';
export type { JsonValue, JsonObject } from './serialization/json.ts';
export * from './errors.ts';
