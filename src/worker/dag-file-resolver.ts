import type { Database } from '../db/connect.ts';
import { loadDagFromFile } from '../dags/loader.ts';
import { taskSettings } from '../dags/task-settings.ts';
import { readSerializedDag } from '../storage/serialized-dags.ts';
import type { TaskResolver } from './worker.ts';

/**
 * Finds a task's operator the way a worker should: the DAG's file is where DAG processing last
 * found it (serialized_dag.fileloc), and only that file is imported, as it is now.
 */
export function dagFileResolver(database: Database): TaskResolver {
  const context = { db: database.db, adapter: database.adapter };
  return async (taskInstance) => {
    const serialized = await readSerializedDag(context, taskInstance.dagId);
    if (!serialized) throw new Error(`DAG ${taskInstance.dagId} is not among the serialized DAGs (deleted, or never processed)`);
    const dag = await loadDagFromFile(serialized.fileloc, taskInstance.dagId);
    const operator = dag.task(taskInstance.taskId);
    if (!operator) throw new Error(`DAG ${taskInstance.dagId} (${serialized.fileloc}) has no task ${taskInstance.taskId}`);
    const settings = taskSettings(dag, operator);
    return {
      operator,
      retry: settings.retry,
      executionTimeoutMs: settings.executionTimeoutMs,
      context: (claimed, started) => ({
        taskInstance: { id: claimed.id, dagId: claimed.dagId, taskId: claimed.taskId, runId: claimed.runId, mapIndex: claimed.mapIndex, tryNumber: started.tryNumber },
      }),
    };
  };
}
