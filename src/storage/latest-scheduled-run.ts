import { fromDbTime } from '../db/schema.ts';
import type { StorageContext } from './context.ts';

/** The logical date of a DAG's latest scheduled run (the next interval starts where its ended); null if it has none. */
export async function latestScheduledLogicalDate({ db }: StorageContext, dagId: string): Promise<number | null> {
  const row = await db
    .selectFrom('dag_run')
    .select('logical_date')
    .where('dag_id', '=', dagId)
    .where('run_type', '=', 'scheduled')
    .orderBy('logical_date', 'desc')
    .limit(1)
    .executeTakeFirst();
  return row ? fromDbTime(row.logical_date) : null;
}
