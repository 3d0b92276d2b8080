import { sql } from '../database/kysely.ts';
import { toDbTime } from '../database/schema.ts';
import type { StorageContext } from './context.ts';
import { deleteUnusedTriggers } from './delete-unused-triggers.ts';
import { lockWaitedTriggers, WAIT_DROPPED } from './dropped-wait.ts';
import { wake, type WakeTopic } from './wake.ts';

/** The end states a person can mark a task instance with (Airflow's mark success / mark failed). */
export type MarkedState = 'success' | 'failed';

export interface MarkResult {
  /** Task instances now in the state asked for. */
  readonly marked: number;
  /** Running ones: their worker is asked to stop the try and leave them in that state (stop_request). */
  readonly stopRequested: number;
  /** Triggers nothing waits on any more: their triggerers stop them and run onKill(). */
  readonly deletedTriggers: number;
}

/**
 * Airflow's mark success / mark failed: the task instances end in `state` whatever they were
 * doing, in one transaction. One that waits (deferred, awaiting input, up for retry or
 * reschedule, scheduled, queued, or in no state) ends now, its wait dropped and its trigger
 * deleted when nothing else waits on it; one running cannot change under its worker, so it gets
 * a stop request the worker carries out (stop-requests.ts), as a signal's stop does. Like a
 * clear, it is unconditional: a person asked for it. Task instances already in `state` are left
 * as they are.
 */
export async function markTaskInstances(
  { db, adapter, keyring }: StorageContext,
  taskInstanceIds: readonly number[],
  state: MarkedState,
  now: number,
): Promise<MarkResult> {
  if (taskInstanceIds.length === 0) return { marked: 0, stopRequested: 0, deletedTriggers: 0 };
  return db.transaction().execute(async (trx) => {
    const ids = [...taskInstanceIds];
    const triggerIds = await lockWaitedTriggers(trx, adapter, ids);
    const ended = await trx
      // transition: mark
      .updateTable('task_instance')
      .set({
        state,
        ...WAIT_DROPPED,
        execution_deadline: null,
        end_date: toDbTime(now),
        updated_at: toDbTime(now),
      })
      .where(adapter.idIn('id', ids))
      .where((eb) => eb.or([eb('state', 'is', null), eb('state', 'not in', ['running', state])]))
      .executeTakeFirst();
    const requested = await trx
      // transition: mark-running
      .updateTable('task_instance')
      .set({ stop_request: state, updated_at: toDbTime(now) })
      .where(adapter.idIn('id', ids))
      .where('state', '=', 'running')
      .where(sql<boolean>`coalesce(stop_request, '') <> ${state}`)
      .executeTakeFirst();
    const marked = Number(ended.numUpdatedRows);
    const stopRequested = Number(requested.numUpdatedRows);
    const deletedTriggers = await deleteUnusedTriggers({ db: trx, adapter, keyring }, triggerIds);
    const topics: WakeTopic[] = [];
    if (marked > 0) topics.push('scheduler');
    if (stopRequested > 0) topics.push('stop-request');
    if (deletedTriggers > 0) topics.push('triggerer');
    await wake(trx, adapter, ...topics);
    return { marked, stopRequested, deletedTriggers };
  });
}
