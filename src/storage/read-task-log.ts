import { fromDbTime } from '../db/schema.ts';
import type { StorageContext } from './context.ts';
import type { TaskLogLine } from './append-task-log-lines.ts';

/** One try's log lines, in the order they were written. */
export async function readTaskLog({ db }: StorageContext, taskInstanceId: number, tryNumber: number): Promise<TaskLogLine[]> {
  const rows = await db
    .selectFrom('task_log')
    .select(['logged_at', 'level', 'message', 'fields'])
    .where('task_instance_id', '=', taskInstanceId)
    .where('try_number', '=', tryNumber)
    .orderBy('id')
    .execute();
  return rows.map((row) => ({
    taskInstanceId,
    tryNumber,
    loggedAt: fromDbTime(row.logged_at),
    level: row.level,
    message: row.message,
    fieldsJson: row.fields,
  }));
}
