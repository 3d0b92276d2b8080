import { wake } from './wake.ts';
import type { StorageContext } from './context.ts';

/**
 * Deletes triggers no task instance points at (nor a composite wait, nor a DAG watching): fired ones (pass their ids: the outcome writer
 * does, right after moving their task instances) and ones whose task instances were cleared or
 * moved elsewhere (no ids: every trigger, the periodic sweep). Rows a deferral holds locked
 * while linking to them are skipped, not waited for.
 */
export async function deleteUnusedTriggers(context: StorageContext, triggerIds?: readonly number[]): Promise<number> {
  const { db, adapter } = context;
  if (triggerIds?.length === 0) return 0;
  let candidates = db
    .selectFrom('trigger')
    .select('trigger.id')
    .where(({ not, exists, selectFrom }) =>
      not(exists(selectFrom('task_instance').select('task_instance.id').whereRef('task_instance.trigger_id', '=', 'trigger.id'))),
    )
    // A member of a composite wait that has not fired into it yet is in use too.
    .where(({ not, exists, selectFrom }) =>
      not(
        exists(
          selectFrom('trigger_member')
            .select('trigger_member.id')
            .whereRef('trigger_member.member_id', '=', 'trigger.id')
            .where('trigger_member.outcome', 'is', null),
        ),
      ),
    )
    // A watcher a DAG is scheduled on is in use for as long as the link is there.
    .where(({ not, exists, selectFrom }) =>
      not(exists(selectFrom('dag_watcher').select('dag_watcher.dag_id').whereRef('dag_watcher.trigger_id', '=', 'trigger.id'))),
    );
  if (triggerIds) candidates = candidates.where(adapter.idIn('trigger.id', triggerIds));
  const deleted = await db.deleteFrom('trigger').where('id', 'in', adapter.lockSkippingLocked(candidates)).returning('id').execute();
  if (deleted.length === 0) return 0;
  return (
    deleted.length +
    (await deleteMembersOfDeletedComposites(
      context,
      deleted.map((row) => row.id),
    ))
  );
}

/**
 * The member lists of the composites among `deletedIds` (fired, timed out, cleared: nothing
 * points at them), then the members nothing else waits on: an anyOf's losers are deleted as it
 * fires, so their triggerers stop them. One statement that finds nothing where no composite was
 * deleted (a foreign key would do it at the cost of a lookup for every deleted trigger).
 */
async function deleteMembersOfDeletedComposites(context: StorageContext, deletedIds: readonly number[]): Promise<number> {
  const orphaned = await context.db.deleteFrom('trigger_member').where(context.adapter.idIn('composite_id', deletedIds)).returning('member_id').execute();
  if (orphaned.length === 0) return 0;
  // The composite's own row and its losers are running on triggerers: they stop them now.
  await wake(context.db, context.adapter, 'triggerer');
  return deleteUnusedTriggers(context, [...new Set(orphaned.map((row) => row.member_id))]);
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
