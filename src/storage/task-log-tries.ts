import type { StorageContext } from './context.ts';

/**
 * The tries of a task instance that have task log lines, ascending. Not always 1 to its
 * try_number: a rescheduled try gives its number back while its lines stay.
 */
export async function taskLogTries({ db }: StorageContext, taskInstanceId: number): Promise<number[]> {
  const rows = await db.selectFrom('task_log').select('try_number').distinct().where('task_instance_id', '=', taskInstanceId).orderBy('try_number').execute();
  return rows.map((row) => row.try_number);
}
