import { toDbTime } from '../database/schema.ts';
import type { StorageContext } from './context.ts';

export interface TaskLogLine {
  readonly taskInstanceId: number;
  readonly tryNumber: number;
  readonly loggedAt: number;
  readonly level: string;
  readonly message: string;
  /** JSON text of the other fields, or null. */
  readonly fieldsJson: string | null;
}

/** A line a trigger logged: stored once, shown in the log of every try that waited on the trigger. */
export interface TriggerLogLine {
  readonly triggerId: number;
  readonly loggedAt: number;
  readonly level: string;
  readonly message: string;
  readonly fieldsJson: string | null;
}

/** Appends lines to task logs, many per statement (bounded by the dialect's bind parameters). */
export async function appendTaskLogLines({ db, adapter }: StorageContext, lines: readonly TaskLogLine[]): Promise<void> {
  const perStatement = Math.floor(adapter.maxBindParameters / 6);
  for (let at = 0; at < lines.length; at += perStatement) {
    await db
      .insertInto('task_log')
      .values(
        lines.slice(at, at + perStatement).map((line) => ({
          task_instance_id: line.taskInstanceId,
          try_number: line.tryNumber,
          logged_at: toDbTime(line.loggedAt),
          level: line.level,
          message: line.message,
          fields: line.fieldsJson === null ? null : adapter.jsonParam(line.fieldsJson),
        })),
      )
      .execute();
  }
}

/** Appends trigger log lines, many per statement. */
export async function appendTriggerLogLines({ db, adapter }: StorageContext, lines: readonly TriggerLogLine[]): Promise<void> {
  const perStatement = Math.floor(adapter.maxBindParameters / 5);
  for (let at = 0; at < lines.length; at += perStatement) {
    await db
      .insertInto('trigger_log')
      .values(
        lines.slice(at, at + perStatement).map((line) => ({
          trigger_id: line.triggerId,
          logged_at: toDbTime(line.loggedAt),
          level: line.level,
          message: line.message,
          fields: line.fieldsJson === null ? null : adapter.jsonParam(line.fieldsJson),
        })),
      )
      .execute();
  }
}
