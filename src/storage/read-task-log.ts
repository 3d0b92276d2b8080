import { fromDbTime } from '../db/schema.ts';
import type { StorageContext } from './context.ts';
import type { TaskLogLine } from './append-task-log-lines.ts';

/** A line of a try's log: the worker's or the task's (triggerId null), or a trigger's it waited on. */
export interface StoredLogLine extends TaskLogLine {
  readonly triggerId: number | null;
}

/**
 * One try's log: its own lines, and the lines of every trigger it waited on logged from the
 * moment it began waiting, interleaved in time order (each source in the order it was written).
 */
export async function readTaskLog({ db }: StorageContext, taskInstanceId: number, tryNumber: number): Promise<StoredLogLine[]> {
  const [own, fromTriggers] = await Promise.all([
    db
      .selectFrom('task_log')
      .select(['logged_at', 'level', 'message', 'fields'])
      .where('task_instance_id', '=', taskInstanceId)
      .where('try_number', '=', tryNumber)
      .orderBy('id')
      .execute(),
    db
      .selectFrom('trigger_wait')
      .innerJoin('trigger_log', 'trigger_log.trigger_id', 'trigger_wait.trigger_id')
      .select(['trigger_log.trigger_id', 'trigger_log.logged_at', 'trigger_log.level', 'trigger_log.message', 'trigger_log.fields'])
      .where('trigger_wait.task_instance_id', '=', taskInstanceId)
      .where('trigger_wait.try_number', '=', tryNumber)
      .whereRef('trigger_log.logged_at', '>=', 'trigger_wait.waited_from')
      .orderBy('trigger_log.id')
      .execute(),
  ]);
  const line = (row: (typeof own)[number], triggerId: number | null): StoredLogLine => ({
    taskInstanceId,
    tryNumber,
    loggedAt: fromDbTime(row.logged_at),
    level: row.level,
    message: row.message,
    fieldsJson: row.fields,
    triggerId,
  });
  const triggerLines = fromTriggers.map((row) => line(row, row.trigger_id));
  const merged: StoredLogLine[] = [];
  let next = 0;
  for (const ownLine of own.map((row) => line(row, null))) {
    while (next < triggerLines.length && triggerLines[next]!.loggedAt < ownLine.loggedAt) merged.push(triggerLines[next++]!);
    merged.push(ownLine);
  }
  merged.push(...triggerLines.slice(next));
  return merged;
}
