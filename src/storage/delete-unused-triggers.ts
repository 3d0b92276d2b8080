import type { StorageContext } from './context.ts';

/**
 * Deletes triggers no task instance points at: fired ones (pass their ids: the outcome writer
 * does, right after moving their task instances) and ones whose task instances were cleared or
 * moved elsewhere (no ids: every trigger, the periodic sweep). Rows a deferral holds locked
 * while linking to them are skipped, not waited for.
 */
export async function deleteUnusedTriggers({ db, adapter }: StorageContext, triggerIds?: readonly number[]): Promise<number> {
  if (triggerIds?.length === 0) return 0;
  let candidates = db
    .selectFrom('trigger')
    .select('trigger.id')
    .where(({ not, exists, selectFrom }) =>
      not(exists(selectFrom('task_instance').select('task_instance.id').whereRef('task_instance.trigger_id', '=', 'trigger.id'))),
    );
  if (triggerIds) candidates = candidates.where(adapter.idIn('trigger.id', triggerIds));
  const result = await db.deleteFrom('trigger').where('id', 'in', adapter.lockSkippingLocked(candidates)).executeTakeFirst();
  return Number(result.numDeletedRows);
}

/**
 * The periodic sweep of deleteUnusedTriggers, a page at a time: of the `limit` triggers after
 * `afterId` (by id), deletes those nothing waits on. `lastId`: the last id looked at, where the
 * next page starts; null when there are no more. A triggerer holding a million triggers sweeps
 * them page by page, never holding its loop (SQLite is synchronous) for the whole table.
 */
export async function sweepUnusedTriggers(context: StorageContext, afterId: number, limit: number): Promise<{ deleted: number; lastId: number | null }> {
  const page = await context.db.selectFrom('trigger').select('id').where('id', '>', afterId).orderBy('id').limit(limit).execute();
  if (page.length === 0) return { deleted: 0, lastId: null };
  const ids = page.map((row) => row.id);
  return { deleted: await deleteUnusedTriggers(context, ids), lastId: page.length < limit ? null : ids[ids.length - 1]! };
}
