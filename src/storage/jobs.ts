import { fromDbTime, toDbTime, type JobState } from '../database/schema.ts';
import type { StorageContext } from './context.ts';

export interface JobFields {
  /** TriggererJob, WorkerJob or SchedulerJob (see db/schema.ts). */
  readonly jobType: string;
  readonly hostname: string;
  readonly pid: number;
  /** Triggers (a triggerer) or task slots (a worker) it runs at once; null where it has none. */
  readonly capacity: number | null;
  /** The queues it serves, as --queues takes them (`default,gpu`); null where it serves none (a scheduler). */
  readonly queues?: string | null;
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
      queues: fields.queues ?? null,
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

/** What tells whether a daemon lives: its job row's state, heartbeat and liveness lock. */
export interface JobLiveness {
  readonly id: number;
  /** state running and no end date: it has not stopped (it may still have died). */
  readonly running: boolean;
  /** Epoch ms of its last heartbeat. */
  readonly latestHeartbeat: number;
  /** What it holds for its life (see liveness-locks.ts); null: only its heartbeat tells. */
  readonly livenessLock: string | null;
}

/**
 * A daemon that rows name as theirs (a trigger's owner, a task instance's worker), with its job
 * row's liveness (null: it has none, pruned or deleted by hand).
 */
export interface JobHolder {
  readonly id: number;
  readonly job: JobLiveness | null;
}

/** A job row's liveness fields as a join read them (all null: no job row), as JobLiveness. */
export function jobLivenessOf(row: {
  readonly job_id: number | null;
  readonly state: string | null;
  readonly end_date: Date | string | null;
  readonly latest_heartbeat: Date | string | null;
  readonly liveness_lock: string | null;
}): JobLiveness | null {
  if (row.job_id === null) return null;
  return {
    id: Number(row.job_id),
    running: row.state === 'running' && row.end_date === null,
    latestHeartbeat: fromDbTime(row.latest_heartbeat!),
    livenessLock: row.liveness_lock,
  };
}

/** Records what job `jobId` holds for its life, once it holds it (before that, only its heartbeat tells). */
export async function setLivenessLock({ db }: StorageContext, jobId: number, lock: string): Promise<void> {
  await db.updateTable('job').set({ liveness_lock: lock }).where('id', '=', jobId).execute();
}

/** The running jobs (of a kind, or all), with what tells whether each lives (a few rows: one per daemon). */
export async function listRunningJobs({ db }: StorageContext, jobType?: string): Promise<JobLiveness[]> {
  let query = db.selectFrom('job').select(['id', 'latest_heartbeat', 'liveness_lock']).where('state', '=', 'running').where('end_date', 'is', null);
  if (jobType !== undefined) query = query.where('job_type', '=', jobType);
  const rows = await query.execute();
  return rows.map((row) => ({ id: row.id, running: true, latestHeartbeat: fromDbTime(row.latest_heartbeat), livenessLock: row.liveness_lock }));
}
