import { sql } from '../database/kysely.ts';
import type { RawBuilder, Transaction, UpdateObject } from 'kysely';
import { toDbTime, type DatabaseSchema, type TaskInstanceState } from '../database/schema.ts';
import type { DialectAdapter } from '../database/dialect.ts';
import { DatabaseError, TaskInstanceStateError } from '../vocabulary/errors.ts';
import { triggerHash, type SerializedTrigger } from '../authoring/triggers/base-trigger.ts';
import { isCompositeClasspath, leafMembers } from '../authoring/triggers/composite-trigger.ts';
import type { Keyring } from '../database/encryption/keyring.ts';
import type { JsonObject } from '../vocabulary/serialization/json.ts';
import { wake, wakeForChangedRows } from './wake.ts';
import type { StorageContext } from './context.ts';
import { describeHolder, stillHeld, type HeldTry } from './held-try.ts';
import { DEFAULT_QUEUE } from '../model/queues.ts';

/** States a task instance may defer from: running (an operator), or scheduled/queued (started from a trigger). */
export const DEFERRABLE_STATES: readonly TaskInstanceState[] = ['running', 'queued', 'scheduled'];

/** A worker defers only the try it runs; the API defers from any of DEFERRABLE_STATES. */
function statesThatMayDefer(held: HeldTry | undefined): readonly TaskInstanceState[] {
  return held ? ['running'] : DEFERRABLE_STATES;
}

/**
 * What a deferral records: a TaskDeferred an operator threw is one; the scheduler builds one
 * from a serialized start trigger (it never holds a trigger object).
 */
export interface Deferral {
  readonly serializedTrigger: SerializedTrigger;
  /** triggerHash(serializedTrigger), or null to opt out of sharing the row with identical waits. */
  readonly triggerHash: string | null;
  readonly method: string;
  readonly kwargs: JsonObject;
  readonly timeoutMs: number | null;
  /**
   * The scheduler starting a task from its trigger: the task instance goes from no state straight
   * to deferred, in one statement, so no worker can claim it between a decision and the deferral.
   */
  readonly startFromTrigger?: boolean;
  /**
   * The task instance's queue, which its trigger rows inherit, so triggerers serving that queue
   * run them; undefined: read from the task instance. A wait in another queue is a trigger row of
   * its own (the queue is part of the hash).
   */
  readonly queue?: string;
}

export interface DeferResult {
  readonly triggerId: number;
  /** True when the deferral joined an identical wait's trigger instead of inserting one. */
  readonly reusedTrigger: boolean;
}

/**
 * In one transaction: find or insert the trigger row and set the task instance to deferred
 * with next_method, next_kwargs, trigger_id and trigger_timeout. The timeout is the earlier of
 * the deferral's own and the task's execution deadline, so execution_timeout spans deferrals.
 * The task instance leaves its worker (the slot is free). A task instance that is no longer
 * deferrable (cleared meanwhile) gets a TaskInstanceStateError and no trigger is left behind.
 * A worker deferring the try it runs passes `held`: the task instance must still be running
 * that try on that worker (see HeldTry), not only be in a state that may defer.
 */
export async function deferTaskInstance(
  { db, adapter, keyring }: StorageContext,
  taskInstanceId: number,
  deferral: Deferral,
  now: number,
  held?: HeldTry,
): Promise<DeferResult> {
  const queue = deferral.queue !== undefined ? deferral.queue : await queueOf(db, taskInstanceId);
  // Sealed (when keys are configured) before the transaction opens, not while it holds locks.
  const nextKwargs = keyring.seal(JSON.stringify(deferral.kwargs), 'task_instance.next_kwargs');
  const trigger: TriggerValues = {
    classpath: deferral.serializedTrigger.classpath,
    kwargs: keyring.seal(JSON.stringify(deferral.serializedTrigger.kwargs), 'trigger.kwargs'),
    hash: deferral.triggerHash === null ? null : keyring.triggerHash(queuedHash(deferral.triggerHash, queue)),
    queue,
  };
  const ownTimeout = deferral.timeoutMs === null ? null : toDbTime(now + deferral.timeoutMs);
  // All a deferral sets but the state, which each statement sets where the state machine's check can read it.
  const deferredFields = (triggerId: number | RawBuilder<number>) => ({
    next_method: deferral.method,
    next_kwargs: adapter.jsonParam(nextKwargs),
    // An event the task resumed with earlier is not this wait's.
    next_event: null,
    trigger_id: triggerId,
    // The earlier of the deferral's own timeout and the task's execution deadline.
    trigger_timeout:
      ownTimeout === null
        ? sql<string | null>`execution_deadline`
        : sql<string>`case when execution_deadline is not null and execution_deadline < ${ownTimeout} then execution_deadline else ${ownTimeout} end`,
    worker_job_id: null,
    updated_at: toDbTime(now),
  });
  const composite = isCompositeClasspath(deferral.serializedTrigger.classpath);
  if (adapter.supportsWritingCtes && !deferral.startFromTrigger && !composite) {
    const done = await deferInOneStatement({ db, adapter, keyring }, taskInstanceId, trigger, deferredFields, held, now);
    if (done) return done;
  }
  // Inside a transaction already (a signal's restart from a trigger), its statements join it.
  const inTransaction = <T>(work: (trx: Transaction<DatabaseSchema>) => Promise<T>): Promise<T> =>
    db.isTransaction ? work(db as Transaction<DatabaseSchema>) : db.transaction().execute(work);
  return inTransaction(async (trx) => {
    // The task instance's weight, read inside the statements that need it: no round trip of its own.
    const priorityWeight = sql<number>`coalesce((select priority_weight from task_instance where id = ${taskInstanceId}), 1)`;
    const linked = await linkTrigger(trx, adapter, trigger, priorityWeight, now);
    const deferred = deferral.startFromTrigger
      ? await trx
          // transition: start-from-trigger
          .updateTable('task_instance')
          .set({ state: 'deferred', ...deferredFields(linked.triggerId) })
          .where('id', '=', taskInstanceId)
          .where('state', 'is', null)
          .executeTakeFirst()
      : await trx
          // transition: defer
          .updateTable('task_instance')
          .set({ state: 'deferred', ...deferredFields(linked.triggerId) })
          .where('id', '=', taskInstanceId)
          .where('state', 'in', statesThatMayDefer(held))
          .$if(held !== undefined, (qb) => qb.where(stillHeld(held!)))
          // A try a signal is stopping does not defer: its worker carries the stop out instead.
          .where('stop_request', 'is', null)
          .executeTakeFirst();
    if (Number(deferred.numUpdatedRows) === 1) {
      // A new composite's leaves: each an ordinary trigger row, shared with identical waits.
      if (composite && !linked.reusedTrigger)
        await linkCompositeMembers(trx, adapter, keyring, linked.triggerId, deferral.serializedTrigger, queue, priorityWeight, now);
      // This try waits on this trigger from now: its log shows the trigger's lines from here on.
      // A task started from its trigger is in try 0 until it runs or ends: the wait is its try 1.
      await trx
        .insertInto('trigger_wait')
        .values({
          task_instance_id: taskInstanceId,
          try_number: sql<number>`(select case when try_number = 0 then 1 else try_number end from task_instance where id = ${taskInstanceId})`,
          trigger_id: linked.triggerId,
          waited_from: toDbTime(now),
        })
        .onConflict((conflict) => conflict.doNothing())
        .execute();
      // A new trigger row to claim, or a timeout that may be the next deadline to sweep at.
      await wake(trx, adapter, 'triggerer');
      return linked;
    }
    // Not deferrable (cleared, or never there): the throw rolls the trigger back too.
    const ti = await trx
      .selectFrom('task_instance')
      .select(['state', 'stop_request', 'worker_job_id', 'try_number'])
      .where('id', '=', taskInstanceId)
      .executeTakeFirst();
    if (!ti) throw new TaskInstanceStateError(`task instance ${taskInstanceId} does not exist`);
    if (ti.stop_request !== null)
      throw new TaskInstanceStateError(`task instance ${taskInstanceId} is being stopped by a signal (${ti.stop_request}); it does not defer`);
    if (held)
      throw new TaskInstanceStateError(
        `task instance ${taskInstanceId} is no longer running try ${held.tryNumber} on worker ${held.workerJobId} ` +
          `(it is ${describeHolder(ti)}); that try's deferral is dropped`,
      );
    throw new TaskInstanceStateError(
      deferral.startFromTrigger
        ? `task instance ${taskInstanceId} is ${ti.state}; only one in no state can start from its trigger`
        : `task instance ${taskInstanceId} is ${ti.state ?? 'in no state'}; only ${DEFERRABLE_STATES.join(', ')} task instances can defer`,
    );
  });
}

/**
 * Where a WITH clause may write (PostgreSQL), the common deferral, an operator's new wait, is
 * one statement in its own transaction, and its wake-up goes with it: one round trip instead of
 * five (BEGIN, three writes, COMMIT). The task instance's row is locked first and the trigger
 * inserted only if it may defer, so a statement that defers nothing writes nothing. Null when it
 * did not defer: the wait is an identical one's (the insert met its hash) or the task instance
 * may not defer; the statement-by-statement transaction then joins the row, or says why not.
 */
async function deferInOneStatement(
  { db, adapter }: StorageContext,
  taskInstanceId: number,
  trigger: TriggerValues,
  deferredFields: (triggerId: RawBuilder<number>) => UpdateObject<DatabaseSchema, 'task_instance'>,
  held: HeldTry | undefined,
  now: number,
): Promise<DeferResult | null> {
  const deferrableStates = statesThatMayDefer(held);
  const time = sql<string>`cast(${toDbTime(now)} as ${sql.raw(adapter.types.time)})`;
  const row = await db
    .with('deferrable', (qc) =>
      adapter.lockForUpdate(
        qc
          .selectFrom('task_instance')
          .select(['id', 'priority_weight'])
          .where('id', '=', taskInstanceId)
          .where('state', 'in', deferrableStates)
          .$if(held !== undefined, (qb) => qb.where(stillHeld(held!)))
          .where('stop_request', 'is', null),
      ),
    )
    .with('linked', (qc) => {
      const insert = qc
        .insertInto('trigger')
        .columns(['classpath', 'kwargs', 'created_at', 'triggerer_id', 'hash', 'priority_weight', 'queue'])
        .expression((eb) =>
          eb
            .selectFrom('deferrable')
            .select([
              sql<string>`cast(${trigger.classpath} as text)`.as('classpath'),
              adapter.jsonParam(trigger.kwargs).as('kwargs'),
              time.as('created_at'),
              sql<null>`null`.as('triggerer_id'),
              sql<string | null>`cast(${trigger.hash} as text)`.as('hash'),
              'priority_weight',
              sql<string>`cast(${trigger.queue} as text)`.as('queue'),
            ]),
        );
      return (trigger.hash === null ? insert : insert.onConflict((conflict) => conflict.column('hash').doNothing())).returning('id');
    })
    .with('deferred', (qc) =>
      qc
        // transition: defer
        .updateTable('task_instance')
        .from(['linked', 'deferrable'])
        .set({ state: 'deferred', ...deferredFields(sql<number>`linked.id`) })
        .whereRef('task_instance.id', '=', 'deferrable.id')
        // As the lock found it (the row cannot change since): said again for the state machine's check.
        .where('state', 'in', deferrableStates)
        .returning(['task_instance.id', 'task_instance.try_number', 'linked.id as trigger_id']),
    )
    .with('waited', (qc) =>
      qc
        .insertInto('trigger_wait')
        .columns(['task_instance_id', 'try_number', 'trigger_id', 'waited_from'])
        .expression((eb) =>
          eb
            .selectFrom('deferred')
            // A try not started yet (0) waits as its try 1, as in the transaction below.
            .select(['id', sql<number>`case when try_number = 0 then 1 else try_number end`.as('try_number'), 'trigger_id', time.as('waited_from')]),
        )
        .onConflict((conflict) => conflict.doNothing()),
    )
    .selectFrom('deferred')
    .select(['trigger_id', wakeForChangedRows(adapter, 'triggerer')])
    .executeTakeFirst();
  return row ? { triggerId: row.trigger_id, reusedTrigger: false } : null;
}

/**
 * Links the leaf members of a composite wait (anyOf, allOf) that was just inserted: each is
 * inserted or joined by its own hash (a member is always shared with identical waits, whatever
 * the composite's own deduplicate says), and listed in trigger_member by its place in the tree.
 */
async function linkCompositeMembers(
  trx: Transaction<DatabaseSchema>,
  adapter: DialectAdapter,
  keyring: Keyring,
  compositeId: number,
  composite: SerializedTrigger,
  queue: string,
  priorityWeight: RawBuilder<number>,
  now: number,
): Promise<void> {
  const members = [];
  for (const leaf of leafMembers(composite)) {
    const values: TriggerValues = {
      classpath: leaf.classpath,
      kwargs: keyring.seal(JSON.stringify(leaf.kwargs), 'trigger.kwargs'),
      hash: keyring.triggerHash(queuedHash(triggerHash(leaf), queue)),
      queue,
    };
    members.push((await linkTrigger(trx, adapter, values, priorityWeight, now)).triggerId);
  }
  await trx
    .insertInto('trigger_member')
    .values(members.map((memberId, index) => ({ composite_id: compositeId, member_index: index, member_id: memberId })))
    .execute();
}

const LINK_ATTEMPTS = 5;

/** The trigger row's values as stored: kwargs sealed and hash keyed when keys are configured. */
interface TriggerValues {
  readonly classpath: string;
  /** JSON text, or its sealed form. */
  readonly kwargs: string;
  readonly hash: string | null;
  /** The queue it inherits from the task instance. */
  readonly queue: string;
}

/** A wait's hash within its queue: identical waits share a row only in the same queue (`default` keeps the hash it had before queues). */
function queuedHash(hash: string, queue: string): string {
  return queue === DEFAULT_QUEUE ? hash : `${hash}@${queue}`;
}

/** The queue of task instance `id` (`default` when there is no such task instance: the deferral then says why it cannot defer). */
async function queueOf(db: StorageContext['db'], id: number): Promise<string> {
  const row = await db.selectFrom('task_instance').select('queue').where('id', '=', id).executeTakeFirst();
  return row?.queue ?? DEFAULT_QUEUE;
}

/**
 * Inserts the trigger or, when the unique hash index says an identical wait exists, joins that
 * row. Joining is an UPDATE (raising the trigger's priority_weight to this task's), which
 * row-locks it: an event write holding the row makes this wait, and if that write deleted the
 * row the UPDATE finds nothing and the loop inserts again. Two deferrals inserting the same new
 * wait at once meet at the unique index; the loser joins the winner's row.
 */
async function linkTrigger(
  trx: Transaction<DatabaseSchema>,
  adapter: DialectAdapter,
  trigger: TriggerValues,
  priorityWeight: RawBuilder<number>,
  now: number,
): Promise<DeferResult> {
  const hash = trigger.hash;
  const values = {
    classpath: trigger.classpath,
    kwargs: adapter.jsonParam(trigger.kwargs),
    created_at: toDbTime(now),
    triggerer_id: null,
    hash,
    priority_weight: priorityWeight,
    queue: trigger.queue,
  };
  if (hash === null) {
    const row = await trx.insertInto('trigger').values(values).returning('id').executeTakeFirstOrThrow();
    return { triggerId: row.id, reusedTrigger: false };
  }
  for (let attempt = 0; attempt < LINK_ATTEMPTS; attempt++) {
    // Most waits are new (a moment, a file): try the insert first, one statement for them.
    const inserted = await trx
      .insertInto('trigger')
      .values(values)
      .onConflict((conflict) => conflict.column('hash').doNothing())
      .returning('id')
      .executeTakeFirst();
    if (inserted) return { triggerId: inserted.id, reusedTrigger: false };
    const joined = await trx
      .updateTable('trigger')
      .set({
        priority_weight: sql<number>`case when priority_weight < ${priorityWeight} then ${priorityWeight} else priority_weight end`,
      })
      .where('hash', '=', hash)
      .returning('id')
      .executeTakeFirst();
    if (joined) return { triggerId: joined.id, reusedTrigger: true };
  }
  throw new DatabaseError(`could not link trigger ${hash} after ${LINK_ATTEMPTS} attempts: it kept firing between lookup and insert; defer again`);
}
