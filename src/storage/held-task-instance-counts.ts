import { sql } from '../database/kysely.ts';
import type { StorageContext } from './context.ts';

/**
 * How many task instances each worker holds (queued for it or running on it), by its job id: what
 * the status page shows against the worker's slots. Workers holding none are absent.
 */
export async function heldTaskInstanceCounts({ db, adapter }: StorageContext, workerIds: readonly number[]): Promise<Map<number, number>> {
  if (workerIds.length === 0) return new Map();
  const rows = await db
    .selectFrom('task_instance')
    .select(['worker_job_id', sql<number>`count(*)`.as('n')])
    .where(adapter.idIn('worker_job_id', workerIds))
    .where('state', 'in', ['queued', 'running'])
    .groupBy('worker_job_id')
    .execute();
  return new Map(rows.map((row) => [row.worker_job_id!, Number(row.n)]));
}
