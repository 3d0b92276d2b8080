import { sql } from '../database/kysely.ts';
import { toDbTime } from '../database/schema.ts';
import { jobLivenessOf, type JobHolder } from './jobs.ts';
import type { StorageContext } from './context.ts';
import { stopRequestCarriedOut } from './stop-requests.ts';

export interface ReapResult {
  /** Claimed but never started: back to scheduled, no try spent. */
  readonly requeued: number;
  /** Running on a dead worker, with tries left: up_for_retry, ready after the task's retry delay. */
  readonly retried: number;
  /** Running on a dead worker, no tries left. */
  readonly failed: number;
  /** Running on a dead worker, which a signal had asked to stop or restart: the request carried out. */
  readonly stopped: number;
}

/** A try a dead worker left running, to be retried. */
export interface ZombieTry {
  readonly dagId: string;
  readonly taskId: string;
  readonly tryNumber: number;
}

/**
 * The workers holding queued or running task instances, with what tells whether each lives: one
 * statement (those task instances are few: at most every worker's slots). Every scheduler pass
 * runs it; the reap below runs only when one of them is found dead.
 */
export async function listTaskHolders({ db }: StorageContext): Promise<JobHolder[]> {
  const rows = await db
    .selectFrom('task_instance')
    .leftJoin('job', 'job.id', 'task_instance.worker_job_id')
    .select(['task_instance.worker_job_id', 'job.id as job_id', 'job.state', 'job.end_date', 'job.latest_heartbeat', 'job.liveness_lock'])
    .distinct()
    .where('task_instance.state', 'in', ['queued', 'running'])
    .where('task_instance.worker_job_id', 'is not', null)
    .execute();
  return rows.map((row) => ({ id: Number(row.worker_job_id), job: jobLivenessOf(row) }));
}

/**
 * Task instances held by workers found dead (see services/jobs/liveness.ts): a worker killed with
 * SIGKILL leaves no task "running" forever. A running one with tries left is retried at
 * `retryReadyAt(try)` (the task's retry delay, which only the caller knows). Each update is
 * conditional on the task instance still being held by one of those workers.
 */
export async function reapZombieTaskInstances(
  { db, adapter }: StorageContext,
  deadWorkerIds: readonly number[],
  now: number,
  retryReadyAt: (zombie: ZombieTry) => Promise<number>,
): Promise<ReapResult> {
  if (deadWorkerIds.length === 0) return { requeued: 0, retried: 0, failed: 0, stopped: 0 };
  const heldByDead = () => adapter.idIn('worker_job_id', deadWorkerIds);
  const released = { worker_job_id: null, updated_at: toDbTime(now) };
  // A try that ran and died is over, as a failed one is when its worker records it: its retry
  // starts afresh from execute() as a new try, not at the resume point of a deferral (which
  // would run again in the same try number, so a resume that kills its worker each time would
  // be retried for ever). A task instance that was only queued never started: it keeps it.
  const tryOver = { ...released, next_method: null, next_kwargs: null, next_event: null };
  const requeued = await db
    // transition: reap-queued
    .updateTable('task_instance')
    .set({ ...released, state: 'scheduled', queued_at: null })
    .where('state', '=', 'queued')
    .where(heldByDead())
    .executeTakeFirst();
  // A try a signal asked to stop ends as asked, not as a failure: it would have been stopped anyway.
  const stopped = await db
    // transition: reap-stopped
    .updateTable('task_instance')
    .set(stopRequestCarriedOut(adapter, now))
    .where('state', '=', 'running')
    .where('stop_request', 'is not', null)
    .where(heldByDead())
    .executeTakeFirst();
  const retriable = await db
    .selectFrom('task_instance')
    .select(['id', 'dag_id', 'task_id', 'try_number', 'worker_job_id'])
    .where('state', '=', 'running')
    .where('stop_request', 'is', null)
    .where(heldByDead())
    .where(sql<boolean>`try_number <= max_tries`)
    .execute();
  let retried = 0;
  for (const zombie of retriable) {
    const readyAt = await retryReadyAt({ dagId: zombie.dag_id, taskId: zombie.task_id, tryNumber: zombie.try_number });
    const updated = await db
      // transition: reap-running
      .updateTable('task_instance')
      .set({ ...tryOver, state: 'up_for_retry', ready_at: toDbTime(readyAt) })
      .where('id', '=', zombie.id)
      .where('state', '=', 'running')
      .where('stop_request', 'is', null)
      .where('worker_job_id', '=', zombie.worker_job_id)
      .executeTakeFirst();
    retried += Number(updated.numUpdatedRows);
  }
  const failed = await db
    // transition: reap-running
    .updateTable('task_instance')
    .set({ ...tryOver, state: 'failed', end_date: toDbTime(now) })
    .where('state', '=', 'running')
    .where('stop_request', 'is', null)
    .where(heldByDead())
    .where(sql<boolean>`try_number > max_tries`)
    .executeTakeFirst();
  return { requeued: Number(requeued.numUpdatedRows), retried, failed: Number(failed.numUpdatedRows), stopped: Number(stopped.numUpdatedRows) };
}
