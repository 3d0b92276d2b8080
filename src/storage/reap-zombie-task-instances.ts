import { sql } from 'kysely';
import { toDbTime, WORKER_JOB_TYPE } from '../database/schema.ts';
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
 * Task instances held by a worker that is not alive (its job ended, or its heartbeat is older
 * than `aliveSince`): a worker killed with SIGKILL leaves no task "running" forever. A running
 * one with tries left is retried at `retryReadyAt(try)` (the task's retry delay, which only the
 * caller knows). Each update is conditional on the task instance still being held by such a
 * worker.
 */
export async function reapZombieTaskInstances(
  { db, adapter }: StorageContext,
  aliveSince: number,
  now: number,
  retryReadyAt: (zombie: ZombieTry) => Promise<number>,
): Promise<ReapResult> {
  const deadWorkers = db
    .selectFrom('job')
    .select('id')
    .where('job_type', '=', WORKER_JOB_TYPE)
    .where((eb) => eb.or([eb('state', '!=', 'running'), eb('end_date', 'is not', null), eb('latest_heartbeat', '<', toDbTime(aliveSince))]));
  // Every scheduler pass comes here: one read when no dead worker holds anything (the usual case).
  const anyHeld = await db
    .selectFrom('task_instance')
    .select('id')
    .where('state', 'in', ['queued', 'running'])
    .where('worker_job_id', 'in', deadWorkers)
    .limit(1)
    .executeTakeFirst();
  if (!anyHeld) return { requeued: 0, retried: 0, failed: 0, stopped: 0 };
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
    .where('worker_job_id', 'in', deadWorkers)
    .executeTakeFirst();
  // A try a signal asked to stop ends as asked, not as a failure: it would have been stopped anyway.
  const stopped = await db
    // transition: reap-stopped
    .updateTable('task_instance')
    .set(stopRequestCarriedOut(adapter, now))
    .where('state', '=', 'running')
    .where('stop_request', 'is not', null)
    .where('worker_job_id', 'in', deadWorkers)
    .executeTakeFirst();
  const retriable = await db
    .selectFrom('task_instance')
    .select(['id', 'dag_id', 'task_id', 'try_number', 'worker_job_id'])
    .where('state', '=', 'running')
    .where('stop_request', 'is', null)
    .where('worker_job_id', 'in', deadWorkers)
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
    .where('worker_job_id', 'in', deadWorkers)
    .where(sql<boolean>`try_number > max_tries`)
    .executeTakeFirst();
  return { requeued: Number(requeued.numUpdatedRows), retried, failed: Number(failed.numUpdatedRows), stopped: Number(stopped.numUpdatedRows) };
}
