import { DEFAULT_QUEUE } from '../model/queues.ts';
import { toDbTime, type TaskInstanceState } from '../database/schema.ts';
import type { StorageContext } from './context.ts';

export interface NewTaskInstance {
  readonly dagId: string;
  readonly taskId: string;
  readonly runId: string;
  readonly mapIndex: number;
  readonly state: TaskInstanceState | null;
  readonly priorityWeight: number;
  readonly maxTries: number;
  readonly operator: string | null;
  /** Its queue. @default 'default' */
  readonly queue?: string;
}

/**
 * Inserts a task instance; its id, or null when (dag_id, run_id, task_id, map_index) already
 * has one (nothing is changed then). A running one gets its start_date and first try.
 */
export async function createTaskInstance({ db }: StorageContext, fields: NewTaskInstance, now: number): Promise<number | null> {
  const started = fields.state === 'running';
  const row = await db
    // transition: create-api
    .insertInto('task_instance')
    .values({
      dag_id: fields.dagId,
      task_id: fields.taskId,
      run_id: fields.runId,
      map_index: fields.mapIndex,
      state: fields.state,
      priority_weight: fields.priorityWeight,
      max_tries: fields.maxTries,
      operator: fields.operator,
      queue: fields.queue ?? DEFAULT_QUEUE,
      try_number: started ? 1 : 0,
      start_date: started ? toDbTime(now) : null,
      updated_at: toDbTime(now),
    })
    .onConflict((conflict) => conflict.columns(['dag_id', 'run_id', 'task_id', 'map_index']).doNothing())
    .returning('id')
    .executeTakeFirst();
  return row?.id ?? null;
}
