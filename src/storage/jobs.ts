import { toDbTime, type JobState } from '../database/schema.ts';
import type { StorageContext } from './context.ts';

export interface JobFields {
  /** TriggererJob, WorkerJob or SchedulerJob (see db/schema.ts). */
  readonly jobType: string;
  readonly hostname: string;
  readonly pid: number;
  /** Triggers (a triggerer) or task slots (a worker) it runs at once; null where it has none. */
  readonly capacity: number | null;
}

/**
 * Inserts the job row of a starting triggerer, worker or scheduler; its id is the process's
 * identity, and its heartbeat is how peers tell it is alive.
 */
export async function registerJob({ db }: StorageContext, fields: JobFields, now: number): Promise<number> {
  const row = await db
    .insertInto('job')
    .values({
      job_type: fields.jobType,
      state: 'running',
      hostname: fields.hostname,
      pid: fields.pid,
      capacity: fields.capacity,
      start_date: toDbTime(now),
      latest_heartbeat: toDbTime(now),
    })
    .returning('id')
    .executeTakeFirstOrThrow();
  return row.id;
}

export async function heartbeatJob({ db }: StorageContext, jobId: number, now: number): Promise<void> {
  await db
    .updateTable('job')
    .set({ latest_heartbeat: toDbTime(now) })
    .where('id', '=', jobId)
    .execute();
}

export async function endJob({ db }: StorageContext, jobId: number, state: Exclude<JobState, 'running'>, now: number): Promise<void> {
  await db
    .updateTable('job')
    .set({ state, end_date: toDbTime(now), latest_heartbeat: toDbTime(now) })
    .where('id', '=', jobId)
    .execute();
}
