import { fromDbTime } from '../database/schema.ts';
import type { InputQuestion, InputResponse } from '../model/human-input.ts';
import type { StorageContext } from './context.ts';

/** A task instance's question, and its response once one came. */
export interface TaskInput {
  readonly taskInstanceId: number;
  readonly dagId: string;
  readonly taskId: string;
  readonly runId: string;
  readonly mapIndex: number;
  /** The task instance's state and try now (awaiting_input while the question waits). */
  readonly state: string | null;
  readonly currentTry: number;
  /** The try that asked it, and the question's nonce (what its links carry). */
  readonly tryNumber: number;
  readonly nonce: string;
  readonly question: InputQuestion;
  readonly askedAt: number;
  readonly timeoutAt: number | null;
  /** The response that won (null while none has), opened. */
  readonly response: InputResponse | null;
}

/** The question of a task instance (null when it asks none), with its response opened. */
export async function readTaskInput({ db, keyring }: StorageContext, taskInstanceId: number): Promise<TaskInput | null> {
  const row = await db
    .selectFrom('task_input')
    .innerJoin('task_instance', 'task_instance.id', 'task_input.task_instance_id')
    .select([
      'task_input.task_instance_id',
      'task_input.try_number',
      'task_input.nonce',
      'task_input.question',
      'task_input.asked_at',
      'task_input.timeout_at',
      'task_input.response',
      'task_instance.dag_id',
      'task_instance.task_id',
      'task_instance.run_id',
      'task_instance.map_index',
      'task_instance.state',
      'task_instance.try_number as current_try',
    ])
    .where('task_input.task_instance_id', '=', taskInstanceId)
    .executeTakeFirst();
  if (!row) return null;
  return {
    taskInstanceId: row.task_instance_id,
    dagId: row.dag_id,
    taskId: row.task_id,
    runId: row.run_id,
    mapIndex: row.map_index,
    state: row.state,
    currentTry: row.current_try,
    tryNumber: row.try_number,
    nonce: row.nonce,
    question: JSON.parse(row.question) as InputQuestion,
    askedAt: fromDbTime(row.asked_at),
    timeoutAt: fromDbTime(row.timeout_at),
    response:
      row.response === null
        ? null
        : (JSON.parse(keyring.open(row.response, 'task_input.response', `the question of task instance ${row.task_instance_id}`)) as InputResponse),
  };
}

/** The task instances awaiting input now, longest waiting first: what the status page lists. */
export async function listAwaitingInput(
  { db }: StorageContext,
  limit: number,
): Promise<{ id: number; dagId: string; taskId: string; runId: string; subject: string; askedAt: number; timeoutAt: number | null }[]> {
  const rows = await db
    .selectFrom('task_instance')
    .innerJoin('task_input', 'task_input.task_instance_id', 'task_instance.id')
    .select([
      'task_instance.id',
      'task_instance.dag_id',
      'task_instance.task_id',
      'task_instance.run_id',
      'task_input.question',
      'task_input.asked_at',
      'task_input.timeout_at',
    ])
    .where('task_instance.state', '=', 'awaiting_input')
    .orderBy('task_input.asked_at')
    .limit(limit)
    .execute();
  return rows.map((row) => ({
    id: row.id,
    dagId: row.dag_id,
    taskId: row.task_id,
    runId: row.run_id,
    subject: (JSON.parse(row.question) as InputQuestion).subject,
    askedAt: fromDbTime(row.asked_at),
    timeoutAt: fromDbTime(row.timeout_at),
  }));
}
