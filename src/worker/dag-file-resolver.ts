import type { Database } from '../db/connect.ts';
import { TaskNotFoundError } from '../errors.ts';
import { Storage } from '../storage/index.ts';
import type { RuntimeContext } from '../operators/base-operator.ts';
import type { JsonObject, JsonValue } from '../serialization/json.ts';
import { loadDagFromFile } from '../dags/loader.ts';
import { taskSettings } from '../dags/task-settings.ts';
import type { TaskResolver } from './worker.ts';
import type { SmartSensors } from '../sensors/base-sensor.ts';
import { DagRunStateBatcher } from '../model/dag-run-state-batcher.ts';
import { SignalService } from '../signals/signal-service.ts';

/**
 * Finds a task's operator the way a worker should: the DAG's file is where DAG processing last
 * found it (serialized_dag.fileloc, read with the claim), and only that file is imported, as it
 * is now.
 */
export function dagFileResolver(database: Database, options: { readonly smartSensors?: SmartSensors } = {}): TaskResolver {
  const storage = new Storage(database);
  // One per worker: every task's dagRunStates() reads (ExternalTaskSensors poking) share its rounds.
  const dagRunStates = new DagRunStateBatcher((keys) => storage.readDagRunStates(keys));
  return async (taskInstance) => {
    const fileloc = taskInstance.fileloc;
    if (fileloc === null) throw new TaskNotFoundError(`DAG ${taskInstance.dagId} is not among the serialized DAGs (deleted, or never processed)`);
    const dag = await loadDagFromFile(fileloc, taskInstance.dagId);
    const operator = dag.task(taskInstance.taskId);
    if (!operator) throw new TaskNotFoundError(`DAG ${taskInstance.dagId} (${fileloc}) has no task ${taskInstance.taskId}`);
    const settings = taskSettings(dag, operator);
    return {
      operator,
      retry: settings.retry,
      executionTimeoutMs: settings.executionTimeoutMs,
      context: (claimed, started, taskLog, signal): RuntimeContext => {
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
          params: { ...(dag.options.params ?? {}), ...(operator.taskOptions.params ?? {}) },
          log: taskLog,
          signal,
          xcomPull: async (taskId) => {
            const returned = await storage.readReturnValue(claimed.dagId, claimed.runId, taskId);
            return returned === null ? null : (JSON.parse(returned) as JsonValue);
          },
          taskReschedules: () => storage.taskReschedules(claimed.id, started.tryNumber),
          dagRunStates: (query) => dagRunStates.read(query),
          sendSignal: (key, value) => SignalService.of(database).send(key, value ?? null),
          latestSignalVersion: (key) => SignalService.of(database).latestVersion(key),
          actedSignal: (key) => storage.readActedSignal(claimed.id, key),
          smartSensors: options.smartSensors,
        };
      },
    };
  };
}
