import type { StorageContext } from './context.ts';

/** One task instance in a DAG's grid of runs × tasks. */
export interface GridCell {
  readonly id: number;
  readonly runId: string;
  readonly taskId: string;
  readonly mapIndex: number;
  readonly state: string | null;
  readonly tryNumber: number;
}

/** The task instances of some runs of one DAG (the status page's grid), by run, task and map index. */
export async function taskInstanceGrid({ db }: StorageContext, dagId: string, runIds: readonly string[]): Promise<GridCell[]> {
  if (runIds.length === 0) return [];
  const rows = await db
    .selectFrom('task_instance')
    .select(['id', 'run_id', 'task_id', 'map_index', 'state', 'try_number'])
    .where('dag_id', '=', dagId)
    .where('run_id', 'in', runIds)
    .orderBy('run_id')
    .orderBy('task_id')
    .orderBy('map_index')
    .execute();
  return rows.map((row) => ({ id: row.id, runId: row.run_id, taskId: row.task_id, mapIndex: row.map_index, state: row.state, tryNumber: row.try_number }));
}
