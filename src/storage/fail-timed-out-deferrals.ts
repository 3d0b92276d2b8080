import { sql } from '../database/kysely.ts';
import { fromDbTime, toDbTime } from '../database/schema.ts';
import { TRIGGER_FAILURE_METHOD, type FailureKwargs, type StorageContext } from './context.ts';
import { wake } from './wake.ts';
import { deleteUnusedTriggers } from './delete-unused-triggers.ts';

export const DEFERRAL_TIMEOUT_KWARGS: FailureKwargs = Object.freeze({
  code: 'DF_TASK_DEFERRAL_TIMEOUT',
  error: "Trigger timeout: the deferral's timeout passed before its trigger fired",
  traceback: null,
  reason: 'timeout',
});

const BATCH = 1000;

/**
 * Fails every deferred task instance whose trigger_timeout has passed: it goes to scheduled
 * with the failure marker and a timeout error, and its trigger is deleted when nothing points
 * at it any more. Idempotent (the update is conditional on state = deferred), so several
 * triggerers may sweep at once. Locks triggers before task instances, like event writes.
 */
export async function failTimedOutDeferrals(context: StorageContext, now: number): Promise<number> {
  let failed = 0;
  for (;;) {
    const batch = await failBatch(context, now);
    failed += batch.failed;
    if (batch.selected < BATCH) return failed;
  }
}

async function failBatch({ db, adapter, keyring }: StorageContext, now: number): Promise<{ selected: number; failed: number }> {
  return db.transaction().execute(async (trx) => {
    const due = await trx
      .selectFrom('task_instance')
      .select(['id', 'trigger_id'])
      .where('state', '=', 'deferred')
      .where('trigger_timeout', '<=', toDbTime(now))
      .orderBy('id')
      .limit(BATCH)
      .execute();
    if (due.length === 0) return { selected: 0, failed: 0 };
    const triggerIds = [...new Set(due.map((row) => row.trigger_id).filter((id): id is number => id !== null))].sort((a, b) => a - b);
    if (triggerIds.length > 0) {
      await adapter.lockForUpdate(trx.selectFrom('trigger').select('id').where(adapter.idIn('id', triggerIds)).orderBy('id')).execute();
    }
    const result = await trx
      // transition: time-out
      .updateTable('task_instance')
      .set({
        state: 'scheduled',
        trigger_id: null,
        next_method: TRIGGER_FAILURE_METHOD,
        next_kwargs: adapter.jsonParam(JSON.stringify(DEFERRAL_TIMEOUT_KWARGS)),
        updated_at: toDbTime(now),
      })
      .where(
        adapter.idIn(
          'id',
          due.map((row) => row.id),
        ),
      )
      .where('state', '=', 'deferred')
      .where('trigger_timeout', '<=', toDbTime(now))
      .executeTakeFirst();
    // Their triggers, if nothing else waits on them (a composite's with its members: see deleteUnusedTriggers).
    await deleteUnusedTriggers({ db: trx, adapter, keyring }, triggerIds);
    if (Number(result.numUpdatedRows) > 0) await wake(trx, adapter, 'worker');
    return { selected: due.length, failed: Number(result.numUpdatedRows) };
  });
}

/** The earliest trigger_timeout among deferred task instances, as epoch ms, or null. */
export async function nextDeferralDeadline({ db }: StorageContext): Promise<number | null> {
  const row = await db
    .selectFrom('task_instance')
    .select(sql<Date | string | null>`min(trigger_timeout)`.as('deadline'))
    .where('state', '=', 'deferred')
    .where('trigger_timeout', 'is not', null)
    .executeTakeFirst();
  return row?.deadline ? fromDbTime(row.deadline) : null;
}
