import type { Selectable } from 'kysely';
import type { TaskInstanceTable } from '../database/schema.ts';
import type { StorageContext } from './context.ts';

/** A task instance row, by id or by its key; null when there is none. */
export async function readTaskInstance(
  { db }: StorageContext,
  by: { readonly id: number } | { readonly dagId: string; readonly runId: string; readonly taskId: string; readonly mapIndex: number },
): Promise<Selectable<TaskInstanceTable> | null> {
  let query = db.selectFrom('task_instance').selectAll();
  query =
    'id' in by
      ? query.where('id', '=', by.id)
      : query.where('dag_id', '=', by.dagId).where('run_id', '=', by.runId).where('task_id', '=', by.taskId).where('map_index', '=', by.mapIndex);
  return (await query.executeTakeFirst()) ?? null;
}
