import { sql } from '../database/kysely.ts';
import type { EncryptionKeyError } from '../vocabulary/errors.ts';
import type { StorageContext } from './context.ts';

/*
 * What a signal sent on a key reaches, as `deferflow signal send` and POST /signals/:key report
 * it (see signals/signal-audience.ts): the waits on signal triggers, and the task instances with
 * an action on the key. Read after the send, outside its transaction: a report, not a promise.
 */

/** A signal trigger row and how many deferred task instances wait on it; kwargs opened (or why not). */
export interface SignalTriggerWait {
  readonly triggerId: number;
  readonly kwargs: string | EncryptionKeyError;
  readonly waiting: number;
}

/**
 * Every trigger row of `classpath` (the signal trigger's) with the deferred task instances on it.
 * Read through trigger_signal_idx (migration 0012), which holds those rows alone: the cost is the
 * signal waits', whatever else waits.
 */
export async function signalTriggerWaits({ db, keyring }: StorageContext, classpath: string): Promise<SignalTriggerWait[]> {
  const rows = await db
    .selectFrom('trigger')
    .innerJoin('task_instance', 'task_instance.trigger_id', 'trigger.id')
    .select(['trigger.id', 'trigger.kwargs'])
    .select((eb) => eb.fn.countAll<number>().as('waiting'))
    // A literal, so that both planners see the partial index's condition met.
    .where('trigger.classpath', '=', sql.lit(classpath))
    .where('task_instance.state', '=', 'deferred')
    .groupBy(['trigger.id', 'trigger.kwargs'])
    .execute();
  const opened = await keyring.openMany(
    rows.map((row) => row.kwargs),
    'trigger.kwargs',
    (index) => `trigger ${rows[index]!.id}`,
  );
  return rows.map((row, index) => ({ triggerId: row.id, kwargs: opened[index]!, waiting: Number(row.waiting) }));
}

/** The task instances of unfinished DAG runs with an action (start, restart, stop) on `key`. */
export async function countSignalActionTasks({ db }: StorageContext, key: string): Promise<number> {
  const row = await db
    .selectFrom('task_instance_signal')
    .innerJoin('task_instance', 'task_instance.id', 'task_instance_signal.task_instance_id')
    .innerJoin('dag_run', (join) => join.onRef('dag_run.dag_id', '=', 'task_instance.dag_id').onRef('dag_run.run_id', '=', 'task_instance.run_id'))
    .select((eb) => eb.fn.countAll<number>().as('n'))
    .where('task_instance_signal.signal_key', '=', key)
    .where('dag_run.state', 'in', ['queued', 'running'])
    .executeTakeFirstOrThrow();
  return Number(row.n);
}

/** Every key a task instance of an unfinished run has an action on. */
export async function signalActionKeys({ db }: StorageContext): Promise<string[]> {
  const rows = await db
    .selectFrom('task_instance_signal')
    .innerJoin('task_instance', 'task_instance.id', 'task_instance_signal.task_instance_id')
    .innerJoin('dag_run', (join) => join.onRef('dag_run.dag_id', '=', 'task_instance.dag_id').onRef('dag_run.run_id', '=', 'task_instance.run_id'))
    .select('task_instance_signal.signal_key')
    .distinct()
    .where('dag_run.state', 'in', ['queued', 'running'])
    .execute();
  return rows.map((row) => row.signal_key);
}
