import { sql } from '../database/kysely.ts';
import { fromDbTime, toDbTime, type TaskInstanceState } from '../database/schema.ts';
import type { ActedSignal, SignalActionPlan } from '../model/signal-actions.ts';
import type { JsonValue } from '../vocabulary/serialization/json.ts';
import type { StorageContext } from './context.ts';
import { deferTaskInstance, type Deferral } from './defer-task-instance.ts';
import { deleteUnusedTriggers } from './delete-unused-triggers.ts';
import { WAIT_DROPPED } from './dropped-wait.ts';
import { wake, type WakeTopic } from './wake.ts';

/*
 * The scheduler's side of signal actions (src/model/signal-actions.ts): find the task instances
 * with a version to act on, and act, once. The worker's side (a running try asked to stop) is in
 * stop-requests.ts.
 */

/** A task instance of an unfinished DAG run with a version of one of its keys it has not taken into account. */
export interface PendingSignalAction {
  readonly taskInstanceId: number;
  readonly dagId: string;
  readonly runId: string;
  readonly taskId: string;
  readonly state: TaskInstanceState | null;
  readonly key: string;
  /** The version its action last took into account, and the key's latest. */
  readonly seenVersion: number;
  readonly latestVersion: number;
}

/** Up to `limit` of them, by task instance. */
export async function pendingSignalActions({ db }: StorageContext, limit: number): Promise<PendingSignalAction[]> {
  const rows = await db
    .selectFrom('task_instance_signal')
    .innerJoin('signal_key', 'signal_key.key', 'task_instance_signal.signal_key')
    .innerJoin('task_instance', 'task_instance.id', 'task_instance_signal.task_instance_id')
    .innerJoin('dag_run', (join) => join.onRef('dag_run.dag_id', '=', 'task_instance.dag_id').onRef('dag_run.run_id', '=', 'task_instance.run_id'))
    .select([
      'task_instance.id',
      'task_instance.dag_id',
      'task_instance.run_id',
      'task_instance.task_id',
      'task_instance.state',
      'task_instance_signal.signal_key',
      'task_instance_signal.version as seen',
      'signal_key.version as latest',
    ])
    .whereRef('signal_key.version', '>', 'task_instance_signal.version')
    .where('dag_run.state', 'in', ['queued', 'running'])
    .orderBy('task_instance.id')
    .orderBy('task_instance_signal.signal_key')
    .limit(limit)
    .execute();
  return rows.map((row) => ({
    taskInstanceId: row.id,
    dagId: row.dag_id,
    runId: row.run_id,
    taskId: row.task_id,
    state: row.state,
    key: row.signal_key,
    seenVersion: Number(row.seen),
    latestVersion: Number(row.latest),
  }));
}

/** A plan as applySignalAction carries it out: a restart from a trigger comes with the deferral its start trigger makes now. */
export type PlanToApply =
  | Exclude<SignalActionPlan, { kind: 'decide' | 'restart-from-trigger' }>
  | (Extract<SignalActionPlan, { kind: 'restart-from-trigger' }> & { readonly startDeferral: Deferral });

/** What applySignalAction did: acted, or found another scheduler had (`taken`) or the state had moved on (`moved`). */
export type SignalActionOutcome = 'acted' | 'taken' | 'moved';

class StateMovedOn extends Error {}

/**
 * Takes the pending version into account and carries out `plan` (never `decide`, which the
 * scheduler's decisions do), in one transaction: the version moves only from the one read, and
 * the task instance changes only from the state read, so of several schedulers one acts, once;
 * a state that moved on meanwhile rolls both back, for the next look to plan again.
 */
export async function applySignalAction(
  { db, adapter, keyring }: StorageContext,
  pending: PendingSignalAction,
  plan: PlanToApply,
  now: number,
): Promise<SignalActionOutcome> {
  try {
    return await db.transaction().execute(async (trx) => {
      const inState = (state: TaskInstanceState | null) => (state === null ? sql<boolean>`state is null` : sql<boolean>`state = ${state}`);
      const topics: WakeTopic[] = [];
      let triggerIds: number[] = [];
      if (plan.kind !== 'consume' && pending.state === 'deferred') {
        // Trigger rows first, as event writes and the timeout sweep lock them.
        const row = await trx.selectFrom('task_instance').select('trigger_id').where('id', '=', pending.taskInstanceId).executeTakeFirst();
        if (row?.trigger_id != null) {
          triggerIds = [row.trigger_id];
          await adapter.lockForUpdate(trx.selectFrom('trigger').select('id').where('id', '=', row.trigger_id)).execute();
        }
      }
      const moved = await trx
        .updateTable('task_instance_signal')
        .set({ version: pending.latestVersion, ...(plan.kind === 'consume' ? {} : { acted_version: pending.latestVersion }) })
        .where('task_instance_id', '=', pending.taskInstanceId)
        .where('signal_key', '=', pending.key)
        .where('version', '=', pending.seenVersion)
        .executeTakeFirst();
      if (Number(moved.numUpdatedRows) !== 1) return 'taken';
      let changed = 1;
      if (plan.kind === 'fresh-try' && (pending.state === 'scheduled' || pending.state === 'queued')) {
        // Not started yet: the start to come is the fresh try, if it does not resume.
        const result = await trx
          // transition: signal-fresh-start
          .updateTable('task_instance')
          .set({ next_method: null, next_kwargs: null, next_event: null, updated_at: toDbTime(now) })
          .where('id', '=', pending.taskInstanceId)
          .where('state', 'in', ['scheduled', 'queued'])
          .where(inState(pending.state))
          .executeTakeFirst();
        changed = Number(result.numUpdatedRows);
      } else if (plan.kind === 'restart-from-trigger') {
        // To no state afresh, then deferred on a new start trigger, in this transaction: no
        // worker claims it meanwhile, and no scheduler finds the version still to act on.
        const result = await trx
          // transition: signal-restart-from-trigger
          .updateTable('task_instance')
          .set({ state: null, ...WAIT_DROPPED, start_date: null, end_date: null, return_value: null, updated_at: toDbTime(now) })
          .where('id', '=', pending.taskInstanceId)
          .where('state', 'in', [
            'scheduled',
            'queued',
            'deferred',
            'awaiting_input',
            'up_for_retry',
            'up_for_reschedule',
            'success',
            'failed',
            'skipped',
            'upstream_failed',
          ])
          .where(inState(pending.state))
          .executeTakeFirst();
        changed = Number(result.numUpdatedRows);
        if (changed === 1) await deferTaskInstance({ db: trx, adapter, keyring }, pending.taskInstanceId, plan.startDeferral, now);
      } else if (plan.kind === 'fresh-try') {
        const result = await trx
          // transition: signal-restart
          .updateTable('task_instance')
          .set({ state: 'scheduled', ...WAIT_DROPPED, end_date: null, return_value: null, updated_at: toDbTime(now) })
          .where('id', '=', pending.taskInstanceId)
          .where('state', 'in', ['deferred', 'awaiting_input', 'up_for_retry', 'up_for_reschedule', 'success', 'failed', 'skipped', 'upstream_failed'])
          .where(inState(pending.state))
          .executeTakeFirst();
        changed = Number(result.numUpdatedRows);
        topics.push('worker');
      } else if (plan.kind === 'end') {
        const result = await trx
          // transition: signal-stop
          .updateTable('task_instance')
          .set({ state: plan.state, ...WAIT_DROPPED, end_date: toDbTime(now), updated_at: toDbTime(now) })
          .where('id', '=', pending.taskInstanceId)
          .where((eb) =>
            eb.or([eb('state', 'is', null), eb('state', 'in', ['scheduled', 'queued', 'deferred', 'awaiting_input', 'up_for_retry', 'up_for_reschedule'])]),
          )
          .where(inState(pending.state))
          .executeTakeFirst();
        changed = Number(result.numUpdatedRows);
        topics.push('scheduler');
      } else if (plan.kind === 'request') {
        const result = await trx
          // transition: request-stop
          .updateTable('task_instance')
          .set({ stop_request: plan.request, updated_at: toDbTime(now) })
          .where('id', '=', pending.taskInstanceId)
          .where('state', '=', 'running')
          .executeTakeFirst();
        changed = Number(result.numUpdatedRows);
        topics.push('stop-request');
      }
      if (changed !== 1) throw new StateMovedOn();
      if (triggerIds.length > 0 && (await deleteUnusedTriggers({ db: trx, adapter, keyring }, triggerIds)) > 0) topics.push('triggerer');
      await wake(trx, adapter, ...topics);
      return 'acted';
    });
  } catch (error) {
    if (error instanceof StateMovedOn) return 'moved';
    throw error;
  }
}

/** A version that starts a task instance with no state (a start or restart action). */
export interface SignalStart {
  readonly key: string;
  readonly version: number;
}

/**
 * (no state) → scheduled for a task instance a signal starts, and the versions recorded as what
 * acted, in one transaction: the task finds them (context.actedSignal) from its first moment.
 * False when it had a state already (another scheduler decided it): nothing is written.
 */
export async function startOnSignal(
  { db, adapter, keyring }: StorageContext,
  taskInstanceId: number,
  starts: readonly SignalStart[],
  now: number,
): Promise<boolean> {
  return db.transaction().execute(async (trx) => {
    const result = await trx
      // transition: signal-start
      .updateTable('task_instance')
      .set({ state: 'scheduled', updated_at: toDbTime(now) })
      .where('id', '=', taskInstanceId)
      .where('state', 'is', null)
      .executeTakeFirst();
    if (Number(result.numUpdatedRows) !== 1) return false;
    await recordSignalStarts({ db: trx, adapter, keyring }, taskInstanceId, starts);
    await wake(trx, adapter, 'worker');
    return true;
  });
}

/**
 * Records `starts` as what acted on the task instance. Idempotent, and whatever another
 * scheduler recorded meanwhile: a version it took into account without acting on it (it saw the
 * task instance already started) is still the one that started it.
 */
export async function recordSignalStarts({ db }: StorageContext, taskInstanceId: number, starts: readonly SignalStart[]): Promise<void> {
  for (const { key, version } of starts) {
    await db
      .updateTable('task_instance_signal')
      .set({ version: sql<number>`case when version < ${version} then ${version} else version end`, acted_version: version })
      .where('task_instance_id', '=', taskInstanceId)
      .where('signal_key', '=', key)
      .where((eb) => eb.or([eb('acted_version', 'is', null), eb('acted_version', '<', version)]))
      .execute();
  }
}

/**
 * The signal on `key` that last started, restarted or stopped the task instance, with its
 * value; null when none has (or the task has no action on the key).
 */
export async function readActedSignal({ db }: StorageContext, taskInstanceId: number, key: string): Promise<ActedSignal | null> {
  const row = await db
    .selectFrom('task_instance_signal')
    .leftJoin('signal', (join) =>
      join.onRef('signal.key', '=', 'task_instance_signal.signal_key').onRef('signal.version', '=', 'task_instance_signal.acted_version'),
    )
    .select(['task_instance_signal.acted_version', 'signal.value', 'signal.sent_at'])
    .where('task_instance_signal.task_instance_id', '=', taskInstanceId)
    .where('task_instance_signal.signal_key', '=', key)
    .executeTakeFirst();
  if (!row || row.acted_version === null) return null;
  return {
    key,
    version: Number(row.acted_version),
    value: row.value == null ? null : (JSON.parse(row.value) as JsonValue),
    sentAt: row.sent_at == null ? null : fromDbTime(row.sent_at),
  };
}
