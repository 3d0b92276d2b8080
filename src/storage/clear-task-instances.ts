import { sql } from '../database/kysely.ts';
import { toDbTime } from '../database/schema.ts';
import type { StorageContext } from './context.ts';
import { deleteUnusedTriggers } from './delete-unused-triggers.ts';
import { lockWaitedTriggers, WAIT_DROPPED } from './dropped-wait.ts';
import { wake } from './wake.ts';

export interface TaskInstanceToClear {
  readonly id: number;
  /** The task's retries now (from its DAG): a cleared task instance gets that many again. */
  readonly retries: number;
}

export interface ClearOptions {
  /** Keep the task instances' durable state (context.state) for their next tries. Default false: it is deleted with the rest. */
  readonly keepState?: boolean;
}

export interface ClearResult {
  readonly cleared: number;
  /** Triggers nothing waits on any more: their triggerers stop them and run onKill(). */
  readonly deletedTriggers: number;
}

/**
 * Airflow's clear: the task instances go back to no state, for the scheduler to run again,
 * with `retries` more tries (max_tries = try_number + retries); what they were waiting on,
 * returned or resumed at is forgotten, and so is their durable state unless `keepState` (a
 * clear means "do it again": an external job's id kept from the last run would re-attach the
 * new tries to the old job), and their questions to people (a link sent for one is refused). In the same transaction the triggers they were deferred
 * on are deleted when nothing else waits on them, so their triggerer stops them promptly. A
 * worker still running one finds it no longer its own and drops its outcome.
 */
export async function clearTaskInstances(
  { db, adapter, keyring }: StorageContext,
  taskInstances: readonly TaskInstanceToClear[],
  options: ClearOptions,
  now: number,
): Promise<ClearResult> {
  if (taskInstances.length === 0) return { cleared: 0, deletedTriggers: 0 };
  return db.transaction().execute(async (trx) => {
    const ids = taskInstances.map((ti) => ti.id);
    const triggerIds = await lockWaitedTriggers(trx, adapter, ids);
    let cleared = 0;
    const byRetries = new Map<number, TaskInstanceToClear[]>();
    for (const ti of taskInstances) byRetries.set(ti.retries, [...(byRetries.get(ti.retries) ?? []), ti]);
    for (const [retries, group] of byRetries) {
      const result = await trx
        // transition: clear
        .updateTable('task_instance')
        .set({
          state: null,
          max_tries: sql<number>`try_number + ${retries}`,
          ...WAIT_DROPPED,
          execution_deadline: null,
          stop_request: null,
          return_value: null,
          end_date: null,
          updated_at: toDbTime(now),
        })
        .where(
          adapter.idIn(
            'id',
            group.map((ti) => ti.id),
          ),
        )
        .executeTakeFirst();
      cleared += Number(result.numUpdatedRows);
    }
    // Their questions go: a link sent for one is refused from now on (DF_INPUT_LINK_INVALID).
    await trx.deleteFrom('task_input').where(adapter.idIn('task_instance_id', ids)).execute();
    if (!options.keepState) await trx.deleteFrom('task_state').where(adapter.idIn('task_instance_id', ids)).execute();
    const deletedTriggers = await deleteUnusedTriggers({ db: trx, adapter, keyring }, triggerIds);
    if (cleared > 0) await wake(trx, adapter, 'scheduler', ...(deletedTriggers > 0 ? (['triggerer'] as const) : []));
    return { cleared, deletedTriggers };
  });
}
