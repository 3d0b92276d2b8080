import { toDbTime, TRIGGERER_JOB_TYPE, type JobState } from '../db/schema.ts';
import type { StorageContext } from './context.ts';

export interface TriggererJobFields {
  readonly hostname: string;
  readonly pid: number;
  readonly capacity: number;
}

/** Inserts the job row of a starting triggerer; its id is the triggerer's identity. */
export async function registerTriggererJob({ db }: StorageContext, fields: TriggererJobFields, now: number): Promise<number> {
  const row = await db
    .insertInto('job')
    .values({
      job_type: TRIGGERER_JOB_TYPE,
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
  await db.updateTable('job').set({ latest_heartbeat: toDbTime(now) }).where('id', '=', jobId).execute();
}

export async function endJob({ db }: StorageContext, jobId: number, state: Exclude<JobState, 'running'>, now: number): Promise<void> {
  await db
    .updateTable('job')
    .set({ state, end_date: toDbTime(now), latest_heartbeat: toDbTime(now) })
    .where('id', '=', jobId)
    .execute();
}
