/**
 * What a task runner process needs to run a claimed task: its DAG file loaded, and the context its
 * code receives, whose database services are the worker's (a runner holds no connection). Only
 * types come from storage, so a runner loads no database code (see task-runner-main.ts).
 */
import type { Logger } from 'pino';
import { TaskNotFoundError } from '../../vocabulary/errors.ts';
import type { ClaimedTaskInstance, StartedTaskInstance } from '../../storage/index.ts';
import type { AnyOperator, RuntimeContext } from '../../authoring/operators/base-operator.ts';
import type { JsonObject } from '../../vocabulary/serialization/json.ts';
import type { Dag } from '../../authoring/dags/dag.ts';
import { loadDagFromFile } from '../../authoring/dags/loader.ts';
import type { SmartSensors } from '../../authoring/sensors/base-sensor.ts';
import { taskState, type TaskStateServices } from '../../authoring/operators/task-state.ts';

/**
 * What a running task asks of deferflow's database through its context. They are served by the
 * worker's own process whether the task runs there or in a task runner (see
 * process-task-runner.ts), so every task shares one connection pool and one batcher.
 */
export type TaskServices = Pick<
  RuntimeContext,
  'xcomPull' | 'taskReschedules' | 'dagRunStates' | 'sendSignal' | 'latestSignalVersion' | 'actedSignal' | 'askForInput'
> &
  TaskStateServices;

/** The names of TaskServices, which a task runner forwards to its worker. */
export const TASK_SERVICE_NAMES = [
  'xcomPull',
  'taskReschedules',
  'dagRunStates',
  'sendSignal',
  'latestSignalVersion',
  'actedSignal',
  'readTaskState',
  'writeTaskState',
  'askForInput',
] as const;

/** How logs and errors name a claimed task instance. */
export function taskLabel(claimed: Pick<ClaimedTaskInstance, 'dagId' | 'taskId' | 'runId' | 'id'>): string {
  return `${claimed.dagId}.${claimed.taskId} (run ${claimed.runId}, task instance ${claimed.id})`;
}

/** Loads the DAG file a claimed task instance's DAG was last found in, and its task. Throws TaskNotFoundError, naming what is missing. */
export async function loadClaimedTask(claimed: ClaimedTaskInstance): Promise<{ dag: Dag; operator: AnyOperator }> {
  const fileloc = claimed.fileloc;
  if (fileloc === null) throw new TaskNotFoundError(`DAG ${claimed.dagId} is not among the serialized DAGs (deleted, or never processed)`);
  const dag = await loadDagFromFile(fileloc, claimed.dagId);
  const operator = dag.task(claimed.taskId);
  if (!operator) throw new TaskNotFoundError(`DAG ${claimed.dagId} (${fileloc}) has no task ${claimed.taskId}`);
  return { dag, operator };
}

/** The context execute() and resumed methods receive. */
export function runtimeContext(
  task: { dag: Dag; operator: AnyOperator },
  claimed: ClaimedTaskInstance,
  started: StartedTaskInstance,
  taskLog: Logger,
  signal: AbortSignal,
  services: TaskServices,
  smartSensors: SmartSensors | undefined,
): RuntimeContext {
  const { readTaskState, writeTaskState, ...contextServices } = services;
  return {
    taskInstance: {
      id: claimed.id,
      dagId: claimed.dagId,
      taskId: claimed.taskId,
      runId: claimed.runId,
      mapIndex: claimed.mapIndex,
      tryNumber: started.tryNumber,
    },
    dagRun: {
      runId: claimed.runId,
      logicalDate: new Date(claimed.logicalDate ?? Date.now()).toISOString(),
      conf: claimed.confJson === null ? {} : (JSON.parse(claimed.confJson) as JsonObject),
      dataIntervalStart: claimed.dataIntervalStart === null ? null : new Date(claimed.dataIntervalStart).toISOString(),
      dataIntervalEnd: claimed.dataIntervalEnd === null ? null : new Date(claimed.dataIntervalEnd).toISOString(),
    },
    params: { ...(task.dag.options.params ?? {}), ...(task.operator.taskOptions.params ?? {}) },
    log: taskLog,
    signal,
    ...contextServices,
    state: taskState({ readTaskState, writeTaskState }),
    smartSensors,
  };
}
