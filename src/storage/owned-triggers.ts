import type { StorageContext } from './context.ts';
import { wake } from './wake.ts';
import type { TriggerRow } from './claim-triggers.ts';
import { openTriggerRows } from './sealed-values.ts';

/**
 * The ids of the triggers triggerer `jobId` owns now, ascending: all of them, or a page (the
 * next `limit` after `afterId`), so a triggerer owning a million reads them without holding its
 * loop (SQLite answers synchronously) for the whole list.
 */
export async function listOwnedTriggerIds(
  { db }: StorageContext,
  jobId: number,
  page?: { readonly afterId: number; readonly limit: number },
): Promise<number[]> {
  let query = db.selectFrom('trigger').select('id').where('triggerer_id', '=', jobId);
  if (page) query = query.where('id', '>', page.afterId).orderBy('id').limit(page.limit);
  const rows = await query.execute();
  return rows.map((row) => row.id);
}

/** How many triggers a triggerer owns, and the sum of their ids: equal digests, same set (but for a rare collision). */
export interface OwnedDigest {
  readonly count: number;
  readonly idSum: number;
}

/** The rows of the given triggers that triggerer `jobId` owns (for triggers it owns but does not run). */
export async function loadOwnedTriggers({ db, adapter, keyring }: StorageContext, jobId: number, ids: readonly number[]): Promise<TriggerRow[]> {
  if (ids.length === 0) return [];
  const rows = await db
    .selectFrom('trigger')
    .select(['id', 'classpath', 'kwargs', 'watcher', 'cursor'])
    .where('triggerer_id', '=', jobId)
    .where(adapter.idIn('id', ids))
    .execute();
  return openTriggerRows(keyring, rows);
}

/**
 * Unowns every trigger of `jobId` and, in the same transaction, wakes the triggerers: a graceful
 * stop hands them to peers, which claim them as the commit reaches them (PostgreSQL NOTIFY; on
 * SQLite, peers watching the file see the commit), not at their next poll.
 */
export async function releaseOwnedTriggers({ db, adapter }: StorageContext, jobId: number): Promise<number> {
  return db.transaction().execute(async (trx) => {
    const result = await trx.updateTable('trigger').set({ triggerer_id: null }).where('triggerer_id', '=', jobId).executeTakeFirst();
    const released = Number(result.numUpdatedRows);
    if (released > 0) await wake(trx, adapter, 'triggerer');
    return released;
  });
}

/** Which of the given trigger ids still have a row. */
export async function existingTriggerIds({ db, adapter }: StorageContext, ids: readonly number[]): Promise<number[]> {
  if (ids.length === 0) return [];
  const rows = await db.selectFrom('trigger').select('id').where(adapter.idIn('id', ids)).execute();
  return rows.map((row) => row.id);
}
