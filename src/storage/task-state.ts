import { fromDbTime, toDbTime } from '../database/schema.ts';
import type { StorageContext } from './context.ts';
import { describeHolder, lockHolder, type HeldTry } from './held-try.ts';

/** One key of a task instance's durable state, its value opened (JSON text). */
export interface TaskStateEntry {
  readonly key: string;
  readonly json: string;
  /** The try that last wrote it. */
  readonly tryNumber: number;
  /** When it was last written (epoch ms). */
  readonly updatedAt: number;
}

/** What a write did: nothing when the task instance is not running on that try (retried, cleared, ended), with what it is `now`. */
export type TaskStateWrite = { readonly written: true } | { readonly written: false; readonly now: string };

/** The value of one key of a task instance's state (JSON text, opened), or null when it has none. */
export async function readTaskStateValue({ db, keyring }: StorageContext, taskInstanceId: number, key: string): Promise<string | null> {
  const row = await db
    .selectFrom('task_state')
    .select(['id', 'value'])
    .where('task_instance_id', '=', taskInstanceId)
    .where('key', '=', key)
    .executeTakeFirst();
  return row === undefined ? null : keyring.open(row.value, 'task_state.value', `task state ${row.id}`);
}

/** Every key of a task instance's state, by key. */
export async function listTaskState({ db, keyring }: StorageContext, taskInstanceId: number): Promise<TaskStateEntry[]> {
  const rows = await db
    .selectFrom('task_state')
    .select(['id', 'key', 'value', 'try_number', 'updated_at'])
    .where('task_instance_id', '=', taskInstanceId)
    .orderBy('key')
    .execute();
  return rows.map((row) => ({
    key: row.key,
    json: keyring.open(row.value, 'task_state.value', `task state ${row.id}`),
    tryNumber: row.try_number,
    updatedAt: fromDbTime(row.updated_at),
  }));
}

/**
 * Sets one key of a task instance's state to `json` (JSON text), or deletes it (null), for the
 * try that holds it (`held`, as the worker's other writes of a try: see held-try.ts). The task
 * instance's row is locked first, as a clear or a retry locks it: a try no longer held (the
 * scheduler retried it, a person cleared it) writes nothing, so a stale try never leaves state
 * behind a clear or over its successor's.
 */
export async function writeTaskState(
  { db, adapter, keyring }: StorageContext,
  write: { readonly taskInstanceId: number; readonly held: HeldTry; readonly key: string; readonly json: string | null },
  now: number,
): Promise<TaskStateWrite> {
  const value = write.json === null ? null : adapter.jsonParam(keyring.seal(write.json, 'task_state.value'));
  const tryNumber = write.held.tryNumber;
  return db.transaction().execute(async (trx) => {
    const holder = await lockHolder(trx, adapter, write.taskInstanceId, write.held);
    if (holder === undefined) return { written: false, now: 'deleted' };
    if (!holder.held) return { written: false, now: describeHolder(holder) };
    if (value === null) {
      await trx.deleteFrom('task_state').where('task_instance_id', '=', write.taskInstanceId).where('key', '=', write.key).execute();
      return { written: true };
    }
    await trx
      .insertInto('task_state')
      .values({ task_instance_id: write.taskInstanceId, key: write.key, value, try_number: tryNumber, updated_at: toDbTime(now) })
      .onConflict((conflict) => conflict.columns(['task_instance_id', 'key']).doUpdateSet({ value, try_number: tryNumber, updated_at: toDbTime(now) }))
      .execute();
    return { written: true };
  });
}
