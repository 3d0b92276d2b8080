import type { StorageContext } from './context.ts';

/**
 * Deletes triggers no task instance points at (their task instances were cleared or moved
 * elsewhere). Rows a deferral holds locked while linking to them are skipped, not waited for.
 */
export async function deleteUnusedTriggers({ db, adapter }: StorageContext): Promise<number> {
  const unused = adapter.lockSkippingLocked(
    db
      .selectFrom('trigger')
      .select('trigger.id')
      .where(({ not, exists, selectFrom }) =>
        not(exists(selectFrom('task_instance').select('task_instance.id').whereRef('task_instance.trigger_id', '=', 'trigger.id'))),
      ),
  );
  const result = await db.deleteFrom('trigger').where('id', 'in', unused).executeTakeFirst();
  return Number(result.numDeletedRows);
}
