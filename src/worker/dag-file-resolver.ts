import type { Logger } from 'pino';
import type { Database } from '../db/connect.ts';
import { fromDbTime } from '../db/schema.ts';
import type { RuntimeContext } from '../operators/base-operator.ts';
import type { JsonObject, JsonValue } from '../serialization/json.ts';
import { loadDagFromFile } from '../dags/loader.ts';
import { taskSettings } from '../dags/task-settings.ts';
import { readSerializedDag } from '../storage/serialized-dags.ts';
import type { TaskResolver } from './worker.ts';

/**
 * Finds a task's operator the way a worker should: the DAG's file is where DAG processing last
 * found it (serialized_dag.fileloc), and only that file is imported, as it is now.
 */
export function dagFileResolver(database: Database, log: Logger): TaskResolver {
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
      context: async (claimed, started): Promise<RuntimeContext> => {
        const run = await database.db
          .selectFrom('dag_run')
          .select(['logical_date', 'conf'])
          .where('dag_id', '=', claimed.dagId)
          .where('run_id', '=', claimed.runId)
          .executeTakeFirst();
        return {
          taskInstance: { id: claimed.id, dagId: claimed.dagId, taskId: claimed.taskId, runId: claimed.runId, mapIndex: claimed.mapIndex, tryNumber: started.tryNumber },
          dagRun: {
            runId: claimed.runId,
            logicalDate: new Date(run ? fromDbTime(run.logical_date) : Date.now()).toISOString(),
            conf: run ? (JSON.parse(run.conf) as JsonObject) : {},
          },
          params: { ...(dag.options.params ?? {}), ...(operator.taskOptions.params ?? {}) },
          log: log.child({ dag_id: claimed.dagId, task_id: claimed.taskId, run_id: claimed.runId, try_number: started.tryNumber }),
          xcomPull: async (taskId) => {
            const row = await database.db
              .selectFrom('task_instance')
              .select('return_value')
              .where('dag_id', '=', claimed.dagId)
              .where('run_id', '=', claimed.runId)
              .where('task_id', '=', taskId)
              .executeTakeFirst();
            return row?.return_value == null ? null : (JSON.parse(row.return_value) as JsonValue);
          },
        };
      },
    };
  };
}
