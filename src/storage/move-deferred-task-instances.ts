import { sql } from '../database/kysely.ts';
import type { RawBuilder, Transaction } from 'kysely';
import { toDbTime, type DatabaseSchema } from '../database/schema.ts';
import type { DialectAdapter, TriggerValue } from '../database/dialect.ts';
import { compositeOutcome } from '../authoring/triggers/composite-trigger.ts';
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
  /** Composite waits these outcomes resolved: to delete with the fired triggers (deleteUnusedTriggers). */
  readonly resolvedComposites: readonly number[];
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
  if (first.length === 0) return { movedTaskInstances: 0, endedTaskInstances: 0, resolvedComposites: [] };
  const { adapter } = context;
  const resumed = await prepared.stored;
  return context.db.transaction().execute(async (trx) => {
    // Without row locks (SQLite) the transaction holds the one write lock already. The rows are
    // locked in id order (the ORDER BY), whatever order the outcomes came in.
    if (adapter.supportsRowLocks) {
      const triggerIds = first.map((outcome) => outcome.triggerId);
      await adapter.lockForUpdate(trx.selectFrom('trigger').select('id').where(adapter.idIn('id', triggerIds)).orderBy('id')).execute();
    }

    let movedTaskInstances = await resumeWaitingTaskInstances(trx, adapter, kind, resumed, now);

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
    // Composite waits these triggers are members of: their outcomes recorded, and the task
    // instances of those now satisfied moved, in this same transaction.
    const composites = await resolveComposites(context, trx, kind, first, now);
    movedTaskInstances += composites.moved;
    await wake(trx, adapter, ...(movedTaskInstances > 0 ? (['worker'] as const) : []), ...(endedTaskInstances > 0 ? (['scheduler'] as const) : []));
    return { movedTaskInstances, endedTaskInstances, resolvedComposites: composites.resolved };
  });
}

/**
 * Every task instance still deferred on one of `values`' triggers goes to scheduled with that
 * trigger's outcome (the event beside next_kwargs, or the failure marker): one statement, each
 * task instance reading its trigger's value by id. Returns how many moved.
 */
async function resumeWaitingTaskInstances(
  trx: Transaction<DatabaseSchema>,
  adapter: DialectAdapter,
  kind: 'event' | 'failure',
  values: readonly TriggerValue[],
  now: number,
): Promise<number> {
  if (values.length === 0) return 0;
  const outcomeOf = await adapter.stageTriggerValues(trx, values);
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
        values.map((value) => value.triggerId),
      ),
    )
    .where('state', '=', 'deferred')
    .executeTakeFirst();
  return Number(moved.numUpdatedRows);
}

/**
 * The composite waits (anyOf, allOf: see composite-trigger.ts) that `outcomes`' triggers are
 * members of and had not fired into: each event is recorded as that member's outcome (once: a
 * member that fires again, or late, finds its outcome set), and each composite whose tree is now
 * satisfied moves its task instances with the composite's event; a member's failure fails the
 * task instances of every composite waiting on it. The composites' rows are locked (after the
 * members', in id order), so two members firing at once in two transactions resolve a composite
 * once: the second sees the first's outcome. Nothing is read beyond one indexed lookup when no
 * composite waits on these triggers. `resolved`: the composites to delete with the fired rows
 * (their remaining members then go too, if nothing else waits on them).
 */
async function resolveComposites(
  context: StorageContext,
  trx: Transaction<DatabaseSchema>,
  kind: 'event' | 'failure',
  outcomes: readonly OutcomeRow[],
  now: number,
): Promise<{ moved: number; resolved: number[] }> {
  const { adapter, keyring } = context;
  const pending = await trx
    .selectFrom('trigger_member')
    .select(['composite_id', 'member_id'])
    .where(
      adapter.idIn(
        'member_id',
        outcomes.map((outcome) => outcome.triggerId),
      ),
    )
    .where('outcome', 'is', null)
    .execute();
  if (pending.length === 0) return { moved: 0, resolved: [] };
  const compositeIds = [...new Set(pending.map((row) => row.composite_id))];
  const composites = await adapter
    .lockForUpdate(trx.selectFrom('trigger').select(['id', 'classpath', 'kwargs']).where(adapter.idIn('id', compositeIds)).orderBy('id'))
    .execute();
  const outcomeOf = new Map(outcomes.map((outcome) => [outcome.triggerId, outcome.json]));
  const resolved: TriggerValue[] = [];
  if (kind === 'failure') {
    // The failure of any member is the composite's: its task instances fail with the member's error.
    const failedMemberOf = new Map(pending.map((row) => [row.composite_id, row.member_id]));
    for (const composite of composites) {
      const json = outcomeOf.get(failedMemberOf.get(composite.id)!)!;
      resolved.push({ triggerId: composite.id, json: keyring.seal(json, 'task_instance.next_kwargs') });
    }
  } else {
    // One statement for every member that fired, each row reading its member's outcome by id (a
    // statement a member held the loop ~0.3 ms each: 180 ms for a batch of a few hundred on SQLite).
    const memberIds = [...new Set(pending.map((row) => row.member_id))];
    const sealed = await keyring.sealMany(
      memberIds.map((memberId) => outcomeOf.get(memberId)!),
      'trigger_member.outcome',
    );
    const memberOutcomeOf = await adapter.stageTriggerValues(
      trx,
      memberIds.map((memberId, index) => ({ triggerId: memberId, json: sealed[index]! })),
    );
    await trx
      .updateTable('trigger_member')
      .set({ outcome: memberOutcomeOf(sql.ref('trigger_member.member_id')) as RawBuilder<string>, fired_at: toDbTime(now) })
      .where(adapter.idIn('member_id', memberIds))
      .where(adapter.idIn('composite_id', compositeIds))
      .where('outcome', 'is', null)
      .execute();
    const fired = await trx
      .selectFrom('trigger_member')
      .select(['id', 'composite_id', 'member_index', 'outcome'])
      .where(adapter.idIn('composite_id', compositeIds))
      .where('outcome', 'is not', null)
      .execute();
    for (const composite of composites) {
      const leaves = new Map(
        fired
          .filter((row) => row.composite_id === composite.id)
          .map((row) => [row.member_index, keyring.open(row.outcome!, 'trigger_member.outcome', `trigger member ${row.id}`)]),
      );
      const tree = { classpath: composite.classpath, kwargs: JSON.parse(keyring.open(composite.kwargs, 'trigger.kwargs', `trigger ${composite.id}`)) };
      const json = compositeOutcome(tree, leaves);
      if (json !== null)
        resolved.push({ triggerId: composite.id, json: keyring.seal(json, 'task_instance.next_event', sealedFormOf(adapter, 'task_instance.next_event')) });
    }
  }
  const moved = await resumeWaitingTaskInstances(trx, adapter, kind, resolved, now);
  return { moved, resolved: resolved.map((value) => value.triggerId) };
}

/** A trigger has one outcome; should a batch carry two, the first (the earlier) stands. */
function firstOutcomePerTrigger(outcomes: readonly OutcomeRow[]): OutcomeRow[] {
  const seen = new Set<number>();
  return outcomes.filter((outcome) => !seen.has(outcome.triggerId) && seen.add(outcome.triggerId));
}
