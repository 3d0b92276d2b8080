import { sql } from '../database/kysely.ts';
import type { RawBuilder } from 'kysely';
import { toDbTime } from '../database/schema.ts';
import type { TriggerValue } from '../database/dialect.ts';
import type { TaskEndState } from '../authoring/triggers/trigger-event.ts';
import { wake } from './wake.ts';
import { sealedFormOf } from './sealed-values.ts';
import { TRIGGER_FAILURE_METHOD, type StorageContext } from './context.ts';

export interface OutcomeRow {
  readonly triggerId: number;
  /** JSON text: the event payload, or the failure marker's next_kwargs. */
  readonly json: string;
  /** An event that ends its task instances in this state rather than scheduling them. */
  readonly endState?: TaskEndState | null;
}

export interface MoveResult {
  /** Task instances moved from deferred to scheduled. */
  readonly movedTaskInstances: number;
  /** Task instances an end event finished (success, failed, skipped) with no worker. */
  readonly endedTaskInstances: number;
}

export interface PreparedMove {
  readonly kind: 'event' | 'failure';
  /** The first outcome of each trigger (see firstOutcomePerTrigger). */
  readonly outcomes: readonly OutcomeRow[];
  /** Those that resume their task instances, with their JSON as stored (sealed, with keys). */
  readonly stored: Promise<readonly TriggerValue[]>;
}

/**
 * A batch made ready for moveDeferredTaskInstances: its values are sealed now, before the
 * transaction takes its locks, and a large batch on the keyring's thread, so a writer that
 * prepares its next batch while writing this one does not wait for the sealing. A success end
 * event's payload becomes the task's return value, stored like every return value: in plain.
 */
export function prepareMove({ keyring, adapter }: StorageContext, outcomes: readonly OutcomeRow[], kind: 'event' | 'failure'): PreparedMove {
  const first = firstOutcomePerTrigger(outcomes);
  const resumed = first.filter((outcome) => !outcome.endState);
  const column = kind === 'event' ? 'task_instance.next_event' : 'task_instance.next_kwargs';
  let stored: Promise<readonly TriggerValue[]> = Promise.resolve(resumed);
  if (keyring.encrypting) {
    // Identical outcomes are sealed once and share the sealed value, as the task instances of one
    // shared trigger always have: a burst of waits for one moment is one seal, on the loop,
    // instead of thousands on the sealing service. Whoever reads the table can tell that those
    // rows hold the same value (never what it is), as the shared trigger_id already tells.
    const distinct = [...new Set(resumed.map((outcome) => outcome.json))];
    stored = keyring.sealMany(distinct, column, sealedFormOf(adapter, column)).then((sealed) => {
      const sealedOf = new Map(distinct.map((json, index) => [json, sealed[index]!]));
      return resumed.map((outcome) => ({ triggerId: outcome.triggerId, json: sealedOf.get(outcome.json)! }));
    });
  }
  // Awaited when the batch is written; until then a failure must not count as unhandled.
  stored.catch(() => {});
  return { kind, outcomes: first, stored };
}

/**
 * The one write behind events and failures: every task instance still deferred on one of the
 * given triggers goes to scheduled carrying its outcome, in one transaction and a fixed number
 * of statements per batch. An end event (TaskEndEvent) instead finishes its task instances in
 * its state (success keeps the payload as the return value): nothing is left for a worker.
 *
 * The update is conditional on (state = deferred AND trigger_id = that trigger): a duplicate
 * or late outcome (a triggerer that lost ownership during a pause, a timeout that came first)
 * changes nothing. The trigger rows are locked first, in id order, as the timeout sweep does,
 * so two writers touching the same task instances wait for each other instead of deadlocking.
 *
 * The triggers themselves are deleted afterwards (deleteUnusedTriggers with their ids), off the
 * path that makes task instances runnable: on PostgreSQL the foreign key checks every deleted
 * trigger with a lookup of its own, which doubled this write. A deferral that joins a trigger
 * between the two finds the row still there, still owned, and not deleted (it points at it);
 * its triggerer runs it again and the new task instance gets its own event.
 */
export async function moveDeferredTaskInstances(context: StorageContext, prepared: PreparedMove, now: number): Promise<MoveResult> {
  const { kind, outcomes: first } = prepared;
  if (first.length === 0) return { movedTaskInstances: 0, endedTaskInstances: 0 };
  const { adapter } = context;
  const resumed = await prepared.stored;
  return context.db.transaction().execute(async (trx) => {
    // Without row locks (SQLite) the transaction holds the one write lock already. The rows are
    // locked in id order (the ORDER BY), whatever order the outcomes came in.
    if (adapter.supportsRowLocks) {
      const triggerIds = first.map((outcome) => outcome.triggerId);
      await adapter.lockForUpdate(trx.selectFrom('trigger').select('id').where(adapter.idIn('id', triggerIds)).orderBy('id')).execute();
    }

    let movedTaskInstances = 0;
    if (resumed.length > 0) {
      // One statement for the whole batch, each task instance reading its trigger's outcome by id.
      const outcomeOf = await adapter.stageTriggerValues(trx, resumed);
      const outcome = outcomeOf(sql.ref('task_instance.trigger_id')) as RawBuilder<string>;
      const moved = await trx
        // transition: resume
        .updateTable('task_instance')
        .set(
          kind === 'event'
            ? // Beside next_kwargs, not merged into it: either may be sealed (the worker joins them).
              { next_event: outcome }
            : { next_method: TRIGGER_FAILURE_METHOD, next_kwargs: outcome, next_event: null },
        )
        .set({ state: 'scheduled', trigger_id: null, updated_at: toDbTime(now) })
        .where(
          adapter.idIn(
            'trigger_id',
            resumed.map((outcome) => outcome.triggerId),
          ),
        )
        .where('state', '=', 'deferred')
        .executeTakeFirst();
      movedTaskInstances = Number(moved.numUpdatedRows);
    }

    let endedTaskInstances = 0;
    for (const endState of new Set(first.flatMap((outcome) => (outcome.endState ? [outcome.endState] : [])))) {
      const ending = first.filter((outcome) => outcome.endState === endState);
      // A success event's payload is the task's return value; other end states keep none.
      const returnValueOf = endState === 'success' ? await adapter.stageTriggerValues(trx, ending) : null;
      const ended = await trx
        // transition: end-from-trigger
        .updateTable('task_instance')
        .set({
          state: endState,
          return_value: returnValueOf ? (returnValueOf(sql.ref('task_instance.trigger_id')) as RawBuilder<string>) : null,
          trigger_id: null,
          trigger_timeout: null,
          next_method: null,
          next_kwargs: null,
          next_event: null,
          // A task started from a trigger and ended by it never ran on a worker: the wait was its try.
          try_number: sql<number>`case when task_instance.try_number = 0 then 1 else task_instance.try_number end`,
          start_date: sql<string>`coalesce(task_instance.start_date, task_instance.updated_at)`,
          end_date: toDbTime(now),
          updated_at: toDbTime(now),
        })
        .where(
          adapter.idIn(
            'trigger_id',
            ending.map((outcome) => outcome.triggerId),
          ),
        )
        .where('state', '=', 'deferred')
        .executeTakeFirst();
      endedTaskInstances += Number(ended.numUpdatedRows);
    }
    await wake(trx, adapter, ...(movedTaskInstances > 0 ? (['worker'] as const) : []), ...(endedTaskInstances > 0 ? (['scheduler'] as const) : []));
    return { movedTaskInstances, endedTaskInstances };
  });
}

/** A trigger has one outcome; should a batch carry two, the first (the earlier) stands. */
function firstOutcomePerTrigger(outcomes: readonly OutcomeRow[]): OutcomeRow[] {
  const seen = new Set<number>();
  return outcomes.filter((outcome) => !seen.has(outcome.triggerId) && seen.add(outcome.triggerId));
}
