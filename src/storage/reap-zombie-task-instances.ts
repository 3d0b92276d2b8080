import { sql } from 'kysely';
import { toDbTime, WORKER_JOB_TYPE } from '../db/schema.ts';
import type { StorageContext } from './context.ts';

export interface ReapResult {
  /** Claimed but never started: back to scheduled, no try spent. */
  readonly requeued: number;
  /** Running on a dead worker, with tries left: up_for_retry (ready at once). */
  readonly retried: number;
  /** Running on a dead worker, no tries left. */
  readonly failed: number;
}

/**
 * Task instances held by a worker that is not alive (its job ended, or its heartbeat is older
 * than `aliveSince`): a worker killed with SIGKILL leaves no task "running" forever. Each
 * update is conditional on the task instance still being held by such a worker.
 */
export async function reapZombieTaskInstances({ db }: StorageContext, aliveSince: number, now: number): Promise<ReapResult> {
  const deadWorkers = db
    .selectFrom('job')
    .select('id')
    .where('job_type', '=', WORKER_JOB_TYPE)
    .where((eb) => eb.or([eb('state', '!=', 'running'), eb('end_date', 'is not', null), eb('latest_heartbeat', '<', toDbTime(aliveSince))]));
  const released = { worker_job_id: null, updated_at: toDbTime(now) };
  const requeued = await db
    .updateTable('task_instance')
    .set({ ...released, state: 'scheduled', queued_at: null })
    .where('state', '=', 'queued')
    .where('worker_job_id', 'in', deadWorkers)
    .executeTakeFirst();
  const retried = await db
    .updateTable('task_instance')
    .set({ ...released, state: 'up_for_retry', ready_at: toDbTime(now) })
    .where('state', '=', 'running')
    .where('worker_job_id', 'in', deadWorkers)
    .where(sql<boolean>`try_number <= max_tries`)
    .executeTakeFirst();
  const failed = await db
    .updateTable('task_instance')
    .set({ ...released, state: 'failed', end_date: toDbTime(now) })
    .where('state', '=', 'running')
    .where('worker_job_id', 'in', deadWorkers)
    .executeTakeFirst();
  return { requeued: Number(requeued.numUpdatedRows), retried: Number(retried.numUpdatedRows), failed: Number(failed.numUpdatedRows) };
}
