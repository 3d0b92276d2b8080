import type { Transaction } from 'kysely';
import type { DialectAdapter } from '../database/dialect.ts';
import type { DatabaseSchema } from '../database/schema.ts';

/*
 * What a task instance leaving its wait for good (a person's clear or mark, a signal's restart
 * or stop) drops, and the order it is dropped in: the trigger rows first, locked in id order as
 * event writes and the timeout sweep lock them, then the task instances, then the triggers
 * nothing waits on any more (deleteUnusedTriggers).
 */

/** The columns of a wait: its resume point, trigger, timeout, retry moment and worker. */
export const WAIT_DROPPED = {
  next_method: null,
  next_kwargs: null,
  next_event: null,
  trigger_id: null,
  trigger_timeout: null,
  ready_at: null,
  worker_job_id: null,
} as const;

/** Locks the trigger rows these task instances wait on, in id order; resolves with their ids. */
export async function lockWaitedTriggers(trx: Transaction<DatabaseSchema>, adapter: DialectAdapter, taskInstanceIds: readonly number[]): Promise<number[]> {
  const waitingOn = await trx
    .selectFrom('task_instance')
    .select('trigger_id')
    .where(adapter.idIn('id', taskInstanceIds))
    .where('trigger_id', 'is not', null)
    .execute();
  const triggerIds = [...new Set(waitingOn.map((row) => row.trigger_id!))].sort((a, b) => a - b);
  if (triggerIds.length > 0) await adapter.lockForUpdate(trx.selectFrom('trigger').select('id').where(adapter.idIn('id', triggerIds)).orderBy('id')).execute();
  return triggerIds;
}
