import type { Logger } from 'pino';
import type { Database } from '../../database/connect.ts';
import { TaskNotFoundError } from '../../vocabulary/errors.ts';
import { type ClaimedTaskInstance, type StartedTaskInstance, openStores } from '../../storage/index.ts';
import type { AnyOperator, RuntimeContext } from '../../authoring/operators/base-operator.ts';
import type { JsonObject, JsonValue } from '../../vocabulary/serialization/json.ts';
import type { Dag } from '../../authoring/dags/dag.ts';
import { loadDagFromFile } from '../../authoring/dags/loader.ts';
import { taskSettings } from '../../authoring/dags/task-settings.ts';
import type { TaskResolver } from './worker.ts';
import type { SmartSensors } from '../../authoring/sensors/base-sensor.ts';
import { DagRunStateBatcher } from '../../model/dag-run-state-batcher.ts';
import { SignalService } from '../../services/signals/signal-service.ts';

/**
 * What a running task asks of deferflow's database through its context. They are served by the
 * worker's own process whether the task runs there or in a task runner (see
 * process-task-runner.ts), so every task shares one connection pool and one batcher.
 */
export type TaskServices = Pick<RuntimeContext, 'xcomPull' | 'taskReschedules' | 'dagRunStates' | 'sendSignal' | 'latestSignalVersion' | 'actedSignal'>;

/** The names of TaskServices, which a task runner forwards to its worker. */
export const TASK_SERVICE_NAMES = ['xcomPull', 'taskReschedules', 'dagRunStates', 'sendSignal', 'latestSignalVersion', 'actedSignal'] as const;

/** Makes the services of each task instance a worker runs; one per worker. */
export function taskServices(database: Database): (claimed: ClaimedTaskInstance, started: StartedTaskInstance) => TaskServices {
  const storage = openStores(database);
  // One per worker: every task's dagRunStates() reads (ExternalTaskSensors poking) share its rounds.
  const dagRunStates = new DagRunStateBatcher((keys) => storage.dagRuns.readDagRunStates(keys));
  return (claimed, started) => ({
    xcomPull: async (taskId) => {
      const returned = await storage.taskInstances.readReturnValue(claimed.dagId, claimed.runId, taskId);
      return returned === null ? null : (JSON.parse(returned) as JsonValue);
    },
    taskReschedules: () => storage.taskInstances.taskReschedules(claimed.id, started.tryNumber),
    dagRunStates: (query) => dagRunStates.read(query),
    sendSignal: (key, value) => SignalService.of(database).send(key, value ?? null),
    latestSignalVersion: (key) => SignalService.of(database).latestVersion(key),
    actedSignal: (key) => storage.signals.readActedSignal(claimed.id, key),
  });
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
    ...services,
    smartSensors,
  };
}

/**
 * Finds a task's operator the way a worker should: the DAG's file is where DAG processing last
 * found it (serialized_dag.fileloc, read with the claim), and only that file is imported, as it
 * is now. The task then runs on the worker's own event loop (`--task-isolation none`).
 */
export function dagFileResolver(database: Database, options: { readonly smartSensors?: SmartSensors } = {}): TaskResolver {
  const services = taskServices(database);
  return async (claimed) => {
    const task = await loadClaimedTask(claimed);
    const settings = taskSettings(task.dag, task.operator);
    return {
      operator: task.operator,
      retry: settings.retry,
      executionTimeoutMs: settings.executionTimeoutMs,
      context: (claimedAgain, started, taskLog, signal): RuntimeContext =>
        runtimeContext(task, claimedAgain, started, taskLog, signal, services(claimedAgain, started), options.smartSensors),
    };
  };
}
