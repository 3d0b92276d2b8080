import type { StorageContext } from './context.ts';

/**
 * The tries of a task instance that have a log (lines of their own, or a trigger they waited
 * on), ascending. Not always 1 to its try_number: a rescheduled try gives its number back while
 * its lines stay.
 */
export async function taskLogTries({ db }: StorageContext, taskInstanceId: number): Promise<number[]> {
  const rows = await db
    .selectFrom('task_log')
    .select('try_number')
    .where('task_instance_id', '=', taskInstanceId)
    .union(db.selectFrom('trigger_wait').select('try_number').where('task_instance_id', '=', taskInstanceId))
    .execute();
  return [...new Set(rows.map((row) => row.try_number))].sort((a, b) => a - b);
}
