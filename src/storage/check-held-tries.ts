import type { StopRequest } from '../database/schema.ts';
import type { StorageContext } from './context.ts';
import { describeHolder, type HeldTry } from './held-try.ts';

/** What a worker's look at the tries it runs found for one of them (nothing: it is still held, unasked). */
export type HeldTryNews =
  /** A signal asked to stop or restart the try (see stop-requests.ts). */
  | { readonly kind: 'stop-requested'; readonly request: StopRequest }
  /** The try is no longer the worker's: `now` says what the task instance is instead. */
  | { readonly kind: 'lost'; readonly now: string };

/**
 * Of the tries a worker runs (task instance id → the try it holds), those a signal asked it to
 * stop, and those it no longer holds: the scheduler reaped them while the worker's heartbeat was
 * stale (it was cut off, or paused) and retried them, here or elsewhere, or someone cleared or
 * deleted them. One read of the few rows a worker runs, at each heartbeat.
 */
export async function checkHeldTries({ db, adapter }: StorageContext, tries: ReadonlyMap<number, HeldTry>): Promise<Map<number, HeldTryNews>> {
  const news = new Map<number, HeldTryNews>();
  if (tries.size === 0) return news;
  const rows = await db
    .selectFrom('task_instance')
    .select(['id', 'state', 'worker_job_id', 'try_number', 'stop_request'])
    .where(adapter.idIn('id', [...tries.keys()]))
    .execute();
  const byId = new Map(rows.map((row) => [row.id, row]));
  for (const [taskInstanceId, held] of tries) {
    const row = byId.get(taskInstanceId);
    if (!row) news.set(taskInstanceId, { kind: 'lost', now: 'deleted' });
    else if (row.state !== 'running' || row.worker_job_id !== held.workerJobId || row.try_number !== held.tryNumber)
      news.set(taskInstanceId, { kind: 'lost', now: describeHolder(row) });
    else if (row.stop_request !== null) news.set(taskInstanceId, { kind: 'stop-requested', request: row.stop_request });
  }
  return news;
}
