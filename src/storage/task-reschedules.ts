import { fromDbTime, toDbTime } from '../database/schema.ts';
import type { TaskReschedule } from '../model/task-reschedule.ts';
import type { StorageContext } from './context.ts';

/** One reschedule of a task instance's try (written with the run's outcome, see finishTaskInstance). */
export async function recordTaskReschedule(
  { db }: StorageContext,
  row: { readonly taskInstanceId: number; readonly tryNumber: number; readonly startedAt: number; readonly endedAt: number; readonly readyAt: number },
): Promise<void> {
  await db
    .insertInto('task_reschedule')
    .values({
      task_instance_id: row.taskInstanceId,
      try_number: row.tryNumber,
      start_date: toDbTime(row.startedAt),
      end_date: toDbTime(row.endedAt),
      reschedule_date: toDbTime(row.readyAt),
    })
    .execute();
}

/** A task instance's reschedules, oldest first: of one try, or of every try. */
export async function taskReschedules({ db }: StorageContext, taskInstanceId: number, tryNumber: number | null): Promise<TaskReschedule[]> {
  let query = db
    .selectFrom('task_reschedule')
    .select(['try_number', 'start_date', 'end_date', 'reschedule_date'])
    .where('task_instance_id', '=', taskInstanceId)
    .orderBy('id');
  if (tryNumber !== null) query = query.where('try_number', '=', tryNumber);
  const rows = await query.execute();
  return rows.map((row) => ({
    tryNumber: row.try_number,
    startDate: fromDbTime(row.start_date),
    endDate: fromDbTime(row.end_date),
    rescheduleDate: fromDbTime(row.reschedule_date),
  }));
}
