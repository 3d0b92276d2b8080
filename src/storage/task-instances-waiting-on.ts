import { fromDbTime } from '../database/schema.ts';
import type { StorageContext } from './context.ts';

/** A task instance deferred on a trigger, named as its trace is (see src/services/observability/tracing.ts). */
export interface WaitingTaskInstance {
  readonly triggerId: number;
  readonly id: number;
  readonly dagId: string;
  readonly runId: string;
  readonly taskId: string;
  readonly mapIndex: number;
  readonly tryNumber: number;
  /** Epoch ms: when it was made (its history's first row). */
  readonly madeAt: number;
}

/**
 * The task instances deferred on these triggers now: whose traces a triggerer's runs of them
 * belong to. Read only with tracing on, once per batch of triggers started.
 */
export async function listTaskInstancesWaitingOn({ db, adapter }: StorageContext, triggerIds: readonly number[]): Promise<WaitingTaskInstance[]> {
  if (triggerIds.length === 0) return [];
  const rows = await db
    .selectFrom('task_instance')
    .select(['trigger_id', 'id', 'dag_id', 'run_id', 'task_id', 'map_index', 'try_number'])
    .select((eb) =>
      eb
        .selectFrom('task_instance_history')
        .select((history) => history.fn.min('task_instance_history.at').as('at'))
        .whereRef('task_instance_history.task_instance_id', '=', 'task_instance.id')
        .as('made_at'),
    )
    .where(adapter.idIn('trigger_id', triggerIds))
    .where('state', '=', 'deferred')
    .execute();
  return rows.map((row) => ({
    triggerId: row.trigger_id!,
    id: row.id,
    dagId: row.dag_id,
    runId: row.run_id,
    taskId: row.task_id,
    mapIndex: row.map_index,
    tryNumber: row.try_number,
    madeAt: row.made_at == null ? Date.now() : fromDbTime(row.made_at),
  }));
}
