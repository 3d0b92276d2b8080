import type { StorageContext } from './context.ts';

/** What resuming a task instance reads: its state, next_method and next_kwargs (JSON text); null when it does not exist. */
export async function readResumeState(
  { db }: StorageContext,
  taskInstanceId: number,
): Promise<{ state: string | null; nextMethod: string | null; nextKwargsJson: string | null } | null> {
  const row = await db.selectFrom('task_instance').select(['state', 'next_method', 'next_kwargs']).where('id', '=', taskInstanceId).executeTakeFirst();
  return row ? { state: row.state, nextMethod: row.next_method, nextKwargsJson: row.next_kwargs } : null;
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
