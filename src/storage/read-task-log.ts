import { fromDbTime } from '../database/schema.ts';
import type { StorageContext } from './context.ts';
import type { TaskLogLine } from './append-task-log-lines.ts';

/** A line of a try's log: the worker's or the task's (triggerId null), or a trigger's it waited on. */
export interface StoredLogLine extends TaskLogLine {
  readonly triggerId: number | null;
}

/**
 * One try's log: its own lines, and every line of each trigger it waited on, interleaved in time
 * order (each source in the order it was written). A trigger's lines are the story of one wait
 * (the row goes once it fires), so a try that joined a shared wait late still sees what the
 * trigger said when it began: what it watches, with what.
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
