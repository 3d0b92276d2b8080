import type { StorageContext } from './context.ts';
import type { TriggerRow } from './claim-triggers.ts';

/** The ids of every trigger triggerer `jobId` owns now. */
export async function listOwnedTriggerIds({ db }: StorageContext, jobId: number): Promise<number[]> {
  const rows = await db.selectFrom('trigger').select('id').where('triggerer_id', '=', jobId).execute();
  return rows.map((row) => row.id);
}

/** The rows of the given triggers that triggerer `jobId` owns (for triggers it owns but does not run). */
export async function loadOwnedTriggers({ db }: StorageContext, jobId: number, ids: readonly number[]): Promise<TriggerRow[]> {
  if (ids.length === 0) return [];
  return db
    .selectFrom('trigger')
    .select(['id', 'classpath', 'kwargs'])
    .where('triggerer_id', '=', jobId)
    .where('id', 'in', ids)
    .execute();
}

/** Unowns every trigger of `jobId` (a graceful stop hands them to peers at once). */
export async function releaseOwnedTriggers({ db }: StorageContext, jobId: number): Promise<number> {
  const result = await db.updateTable('trigger').set({ triggerer_id: null }).where('triggerer_id', '=', jobId).executeTakeFirst();
  return Number(result.numUpdatedRows);
}
