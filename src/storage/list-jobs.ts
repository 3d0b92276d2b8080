import { fromDbTime } from '../database/schema.ts';
import type { StorageContext } from './context.ts';

/** What judging a job's liveness reads of its row (judgeJobs): every listing of jobs carries it. */
export interface JobRowLiveness {
  readonly id: number;
  readonly jobType: string;
  readonly state: string;
  readonly endDate: number | null;
  readonly latestHeartbeat: number | null;
  /** What it holds for its life (see liveness-locks.ts); null: only its heartbeat tells. */
  readonly livenessLock: string | null;
}

export interface JobListing extends JobRowLiveness {
  readonly hostname: string;
  readonly pid: number | null;
  readonly capacity: number | null;
  readonly startDate: number;
  /** The queues a worker or triggerer serves, as --queues took them; null: a scheduler, or `default` only. */
  readonly queues: string | null;
}

export interface JobFilter {
  readonly jobType?: string;
  readonly hostname?: string;
  /** Only rows still saying `running` (alive, or killed without ending them), latest heartbeat first. */
  readonly runningOnly?: boolean;
  readonly limit: number;
}

/** Job rows (triggerers, workers, schedulers), newest first (with runningOnly: freshest heartbeat first). */
export async function listJobs({ db }: StorageContext, filter: JobFilter): Promise<JobListing[]> {
  let query = db.selectFrom('job').selectAll().limit(filter.limit);
  query = filter.runningOnly
    ? query.where('state', '=', 'running').where('end_date', 'is', null).orderBy('latest_heartbeat', 'desc').orderBy('id', 'desc')
    : query.orderBy('id', 'desc');
  if (filter.jobType !== undefined) query = query.where('job_type', '=', filter.jobType);
  if (filter.hostname !== undefined) query = query.where('hostname', '=', filter.hostname);
  return (await query.execute()).map((row) => ({
    id: row.id,
    jobType: row.job_type,
    state: row.state,
    hostname: row.hostname,
    pid: row.pid,
    capacity: row.capacity,
    startDate: fromDbTime(row.start_date)!,
    endDate: fromDbTime(row.end_date),
    latestHeartbeat: fromDbTime(row.latest_heartbeat),
    livenessLock: row.liveness_lock,
    queues: row.queues,
  }));
}
