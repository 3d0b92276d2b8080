import { sql } from 'kysely';
import { fromDbTime } from '../db/schema.ts';
import type { StorageContext } from './context.ts';

export interface TaskInstanceOfRunId {
  readonly id: number;
  readonly dagId: string;
  readonly taskId: string;
  /**
   * The try it is on: as stored, except for a sensor between reschedules (its try is given back
   * until its next poke starts; see finishTaskInstance), which is on the try it rescheduled.
   */
  readonly tryNumber: number;
  readonly state: string | null;
  /** The host of the worker that last ran it; null when no worker ever did (started and ended by its trigger). */
  readonly hostname: string | null;
  readonly startDate: number | null;
  readonly endDate: number | null;
  readonly nextMethod: string | null;
  /** Times it was rescheduled, every try together (a sensor in reschedule mode). */
  readonly reschedules: number;
}

/** The states of a sensor in reschedule mode from one poke to the next, while its try is given back. */
const BETWEEN_POKES = new Set(['up_for_reschedule', 'scheduled', 'queued']);

/**
 * The task instances of the runs with this run id (of every DAG that has one, unless `dagId`),
 * by DAG and task id: what the CLI looks a task up in when users name a run, not a DAG.
 */
export async function taskInstancesOfRunId({ db }: StorageContext, runId: string, dagId?: string): Promise<TaskInstanceOfRunId[]> {
  let query = db
    .selectFrom('task_instance')
    .select(['id', 'dag_id', 'task_id', 'try_number', 'state', 'hostname', 'start_date', 'end_date', 'next_method'])
    .select((eb) =>
      eb
        .selectFrom('task_reschedule')
        .select((count) => count.fn.countAll<number>().as('n'))
        .whereRef('task_reschedule.task_instance_id', '=', 'task_instance.id')
        .as('reschedules'),
    )
    .select((eb) =>
      eb
        .selectFrom('task_reschedule')
        .select((count) => count.fn.countAll<number>().as('n'))
        .whereRef('task_reschedule.task_instance_id', '=', 'task_instance.id')
        .where('task_reschedule.try_number', '=', sql<number>`task_instance.try_number + 1`)
        .as('reschedules_of_next_try'),
    )
    .where('run_id', '=', runId)
    .orderBy('dag_id')
    .orderBy('task_id');
  if (dagId !== undefined) query = query.where('dag_id', '=', dagId);
  return (await query.execute()).map((row) => ({
    id: row.id,
    dagId: row.dag_id,
    taskId: row.task_id,
    tryNumber: row.try_number + (BETWEEN_POKES.has(row.state ?? '') && Number(row.reschedules_of_next_try ?? 0) > 0 ? 1 : 0),
    state: row.state,
    hostname: row.hostname,
    startDate: fromDbTime(row.start_date),
    endDate: fromDbTime(row.end_date),
    nextMethod: row.next_method,
    reschedules: Number(row.reschedules ?? 0),
  }));
}
