import { sql, type RawBuilder } from 'kysely';
import { toDbTime } from '../db/schema.ts';
import { TRIGGER_FAILURE_METHOD, type StorageContext } from './context.ts';

export interface TriggerOutcome {
  readonly triggerId: number;
  /** JSON text: the event payload, or the failure marker's next_kwargs. */
  readonly json: string;
}

export interface MoveResult {
  /** Task instances moved from deferred to scheduled. */
  readonly movedTaskInstances: number;
  /** Trigger rows removed because nothing pointed at them any more. */
  readonly deletedTriggers: number;
}

/**
 * The one write behind events and failures: every task instance still deferred on one of the
 * given triggers goes to scheduled carrying its outcome, and the triggers nothing points at
 * any more are deleted, all in one transaction and a fixed number of statements per batch.
 *
 * The update is conditional on (state = deferred AND trigger_id = that trigger): a duplicate
 * or late outcome (a triggerer that lost ownership during a pause, a timeout that came first)
 * changes nothing. The trigger rows are locked first, in id order, the same order a deferral
 * that links to an existing trigger uses, so such a link either commits before this (and its
 * task instance is moved here) or finds the row gone and inserts a new trigger.
 */
export async function moveDeferredTaskInstances(
  context: StorageContext,
  outcomes: readonly TriggerOutcome[],
  kind: 'event' | 'failure',
  now: number,
): Promise<MoveResult> {
  if (outcomes.length === 0) return { movedTaskInstances: 0, deletedTriggers: 0 };
  const { adapter } = context;
  return context.db.transaction().execute(async (trx) => {
    const triggerIds = [...new Set(outcomes.map((outcome) => outcome.triggerId))].sort((a, b) => a - b);
    await adapter.lockForUpdate(trx.selectFrom('trigger').select('id').where('id', 'in', triggerIds).orderBy('id')).execute();

    // One JSON object maps each trigger id to its outcome, so the statement stays one
    // index lookup per task instance however many distinct payloads the batch carries.
    const outcomeByTrigger = `{${outcomes.map((outcome) => `"${outcome.triggerId}":${outcome.json}`).join(',')}}`;
    const outcome = adapter.jsonMapValue(outcomeByTrigger, sql.ref('task_instance.trigger_id'));
    const moved = await trx
      .updateTable('task_instance')
      .set(
        kind === 'event'
          ? { next_kwargs: adapter.jsonSetKey(sql.ref('task_instance.next_kwargs'), 'event', outcome) }
          : { next_method: TRIGGER_FAILURE_METHOD, next_kwargs: outcome as RawBuilder<string> },
      )
      .set({ state: 'scheduled', trigger_id: null, updated_at: toDbTime(now) })
      .where('trigger_id', 'in', triggerIds)
      .where('state', '=', 'deferred')
      .executeTakeFirst();

    const deleted = await trx
      .deleteFrom('trigger')
      .where('id', 'in', triggerIds)
      .where(({ not, exists, selectFrom }) =>
        not(exists(selectFrom('task_instance').select('task_instance.id').whereRef('task_instance.trigger_id', '=', 'trigger.id'))),
      )
      .executeTakeFirst();
    return { movedTaskInstances: Number(moved.numUpdatedRows), deletedTriggers: Number(deleted.numDeletedRows) };
  });
}
