import { sql } from '../database/kysely.ts';
import { toDbTime, type StopRequest } from '../database/schema.ts';
import type { StorageContext } from './context.ts';
import type { DialectAdapter } from '../database/dialect.ts';
import { wake } from './wake.ts';
import { stillHeld, type HeldTry } from './held-try.ts';

/*
 * A signal that stops or restarts a running task instance cannot change its state under the
 * worker running it: the scheduler sets stop_request (signal-actions.ts), and the worker aborts
 * the try and carries the request out here. Its outcome, should the try still return one, is
 * refused (finish, defer and hand-back all require no stop_request). The worker finds requests
 * with checkHeldTries (check-held-tries.ts).
 */

/**
 * The state a stop request leaves a running task instance in, and what goes with it: a restart
 * is scheduled afresh (the stopped try counts; the next start takes a new one), a stop ends it.
 */
export function stopRequestCarriedOut(adapter: DialectAdapter, now: number) {
  // Typed: inside a CASE, PostgreSQL takes a bare parameter for text.
  const nowTime = sql<string>`cast(${toDbTime(now)} as ${sql.raw(adapter.types.time)})`;
  return {
    state: sql<'scheduled' | 'success' | 'failed' | 'skipped'>`case when stop_request = 'restart' then 'scheduled' else stop_request end`,
    end_date: sql<string | null>`case when stop_request = 'restart' then null else ${nowTime} end`,
    stop_request: null,
    next_method: null,
    next_kwargs: null,
    next_event: null,
    return_value: null,
    queued_at: null,
    worker_job_id: null,
    updated_at: toDbTime(now),
  };
}

/**
 * running (stop requested) → scheduled (restart) or the requested end state, for the worker
 * that ran the stopped try. Returns what it carried out, or null when there was nothing to (no
 * request, or the worker no longer holds the try: see HeldTry).
 */
export async function carryOutStopRequest({ db, adapter }: StorageContext, taskInstanceId: number, held: HeldTry, now: number): Promise<StopRequest | null> {
  return db.transaction().execute(async (trx) => {
    const row = await trx
      .selectFrom('task_instance')
      .select('stop_request')
      .where('id', '=', taskInstanceId)
      .where('state', '=', 'running')
      .where(stillHeld(held))
      .where('stop_request', 'is not', null)
      .executeTakeFirst();
    if (!row?.stop_request) return null;
    const result = await trx
      // transition: stop-running
      .updateTable('task_instance')
      .set(stopRequestCarriedOut(adapter, now))
      .where('id', '=', taskInstanceId)
      .where('state', '=', 'running')
      .where(stillHeld(held))
      .where('stop_request', '=', row.stop_request)
      .executeTakeFirst();
    if (Number(result.numUpdatedRows) !== 1) return null;
    await wake(trx, adapter, row.stop_request === 'restart' ? 'worker' : 'scheduler');
    return row.stop_request;
  });
}
