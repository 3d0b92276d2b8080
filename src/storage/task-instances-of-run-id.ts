import { sql } from '../database/kysely.ts';
import { fromDbTime } from '../database/schema.ts';
import type { StorageContext } from './context.ts';

export interface TaskInstanceOfRunId {
  readonly id: number;
  readonly dagId: string;
  readonly taskId: string;
  /** Its map index; -1 when its task is not mapped. */
  readonly mapIndex: number;
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
  // One pass over the reschedules: every try's count, and the next try's (a sensor between pokes).
  let query = db
    .selectFrom('task_instance')
    .leftJoin('task_reschedule', 'task_reschedule.task_instance_id', 'task_instance.id')
    .select([
      'task_instance.id',
      'task_instance.dag_id',
      'task_instance.task_id',
      'task_instance.map_index',
      'task_instance.try_number',
      'task_instance.state',
      'task_instance.hostname',
      'task_instance.start_date',
      'task_instance.end_date',
      'task_instance.next_method',
    ])
    .select((eb) => [
      eb.fn.count<number>('task_reschedule.id').as('reschedules'),
      eb.fn.sum<number>(sql`case when task_reschedule.try_number = task_instance.try_number + 1 then 1 else 0 end`).as('reschedules_of_next_try'),
    ])
    .groupBy('task_instance.id')
    .where('task_instance.run_id', '=', runId)
    .orderBy('task_instance.dag_id')
    .orderBy('task_instance.task_id')
    .orderBy('task_instance.map_index');
  if (dagId !== undefined) query = query.where('task_instance.dag_id', '=', dagId);
  return (await query.execute()).map((row) => ({
    id: row.id,
    dagId: row.dag_id,
    taskId: row.task_id,
    mapIndex: row.map_index,
    tryNumber: row.try_number + (BETWEEN_POKES.has(row.state ?? '') && Number(row.reschedules_of_next_try ?? 0) > 0 ? 1 : 0),
    state: row.state,
    hostname: row.hostname,
    startDate: fromDbTime(row.start_date),
    endDate: fromDbTime(row.end_date),
    nextMethod: row.next_method,
    reschedules: Number(row.reschedules ?? 0),
  }));
}
