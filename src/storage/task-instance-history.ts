import { fromDbTime, type TaskInstanceState } from '../database/schema.ts';
import type { StorageContext } from './context.ts';

/** A state a task instance entered, and when (see migration 0019: the database writes these). */
export interface StateChange {
  readonly taskInstanceId: number;
  readonly tryNumber: number;
  readonly state: TaskInstanceState | null;
  /** Epoch ms. */
  readonly at: number;
  readonly triggerId: number | null;
  readonly workerJobId: number | null;
}

/** The state changes of some task instances (a run's), each one's in the order they happened. */
export async function listStateChanges({ db, adapter }: StorageContext, taskInstanceIds: readonly number[]): Promise<StateChange[]> {
  if (taskInstanceIds.length === 0) return [];
  const rows = await db
    .selectFrom('task_instance_history')
    .select(['task_instance_id', 'try_number', 'state', 'at', 'trigger_id', 'worker_job_id'])
    .where(adapter.idIn('task_instance_id', taskInstanceIds))
    .orderBy('task_instance_id')
    .orderBy('id')
    .execute();
  return rows.map((row) => ({
    taskInstanceId: row.task_instance_id,
    tryNumber: row.try_number,
    state: row.state,
    at: fromDbTime(row.at),
    triggerId: row.trigger_id,
    workerJobId: row.worker_job_id,
  }));
}
