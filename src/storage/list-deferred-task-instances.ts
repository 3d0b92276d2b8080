import { fromDbTime } from '../database/schema.ts';
import type { StorageContext } from './context.ts';

/** A deferred task instance as the status page shows it: what it waits on, since when, until when. */
export interface DeferredTaskInstance {
  readonly id: number;
  readonly dagId: string;
  readonly taskId: string;
  readonly runId: string;
  readonly tryNumber: number;
  readonly nextMethod: string | null;
  readonly triggerId: number | null;
  readonly classpath: string | null;
  /** The triggerer job running its trigger; null while unowned. */
  readonly triggererId: number | null;
  /** When this try began waiting on the trigger (null for a deferral made before trigger waits were recorded). */
  readonly waitingSince: number | null;
  /** When the deferral times out; null for never. */
  readonly timeoutAt: number | null;
}

/**
 * Deferred task instances by id, `limit` at a time after `afterId` (keyset paging: every page
 * costs the same however many there are), optionally of one DAG.
 */
export async function listDeferredTaskInstances(
  { db }: StorageContext,
  page: { readonly limit: number; readonly afterId?: number; readonly dagId?: string },
): Promise<DeferredTaskInstance[]> {
  let query = db
    .selectFrom('task_instance as ti')
    .leftJoin('trigger', 'trigger.id', 'ti.trigger_id')
    .leftJoin('trigger_wait as wait', (join) =>
      join.onRef('wait.task_instance_id', '=', 'ti.id').onRef('wait.try_number', '=', 'ti.try_number').onRef('wait.trigger_id', '=', 'ti.trigger_id'),
    )
    .select([
      'ti.id',
      'ti.dag_id',
      'ti.task_id',
      'ti.run_id',
      'ti.try_number',
      'ti.next_method',
      'ti.trigger_id',
      'ti.trigger_timeout',
      'trigger.classpath',
      'trigger.triggerer_id',
      'wait.waited_from',
    ])
    .where('ti.state', '=', 'deferred')
    .orderBy('ti.id')
    .limit(page.limit);
  if (page.afterId !== undefined) query = query.where('ti.id', '>', page.afterId);
  if (page.dagId !== undefined) query = query.where('ti.dag_id', '=', page.dagId);
  return (await query.execute()).map((row) => ({
    id: row.id,
    dagId: row.dag_id,
    taskId: row.task_id,
    runId: row.run_id,
    tryNumber: row.try_number,
    nextMethod: row.next_method,
    triggerId: row.trigger_id,
    classpath: row.classpath ?? null,
    triggererId: row.triggerer_id ?? null,
    waitingSince: row.waited_from == null ? null : fromDbTime(row.waited_from),
    timeoutAt: row.trigger_timeout == null ? null : fromDbTime(row.trigger_timeout),
  }));
}
