import type { StorageContext } from './context.ts';
import { openNextKwargs } from './sealed-values.ts';

/**
 * What resuming a task instance reads: its state, next_method and next_kwargs (JSON text, with
 * the event); null when it does not exist. EncryptionKeyError when they cannot be decrypted.
 */
export async function readResumeState(
  { db, keyring }: StorageContext,
  taskInstanceId: number,
): Promise<{ state: string | null; nextMethod: string | null; nextKwargsJson: string | null } | null> {
  const row = await db
    .selectFrom('task_instance')
    .select(['state', 'next_method', 'next_kwargs', 'next_event'])
    .where('id', '=', taskInstanceId)
    .executeTakeFirst();
  if (!row) return null;
  const opened = openNextKwargs(keyring, taskInstanceId, row.next_kwargs, row.next_event);
  if (opened.unreadable) throw opened.unreadable;
  return { state: row.state, nextMethod: row.next_method, nextKwargsJson: opened.json };
}

/** A task instance's return value (JSON text) in a DAG run, by task id: what xcomPull reads; null when none. */
export async function readReturnValue({ db }: StorageContext, dagId: string, runId: string, taskId: string): Promise<string | null> {
  const row = await db
    .selectFrom('task_instance')
    .select('return_value')
    .where('dag_id', '=', dagId)
    .where('run_id', '=', runId)
    .where('task_id', '=', taskId)
    .executeTakeFirst();
  return row?.return_value ?? null;
}
