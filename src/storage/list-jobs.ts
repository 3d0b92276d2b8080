import { fromDbTime } from '../db/schema.ts';
import type { StorageContext } from './context.ts';

export interface JobListing {
  readonly id: number;
  readonly jobType: string;
  readonly state: string;
  readonly hostname: string;
  readonly pid: number | null;
  readonly capacity: number | null;
  readonly startDate: number;
  readonly endDate: number | null;
  readonly latestHeartbeat: number | null;
}

/** Job rows (triggerers, workers, schedulers), newest first: running ones first, then ended. */
export async function listJobs({ db }: StorageContext, filter: { jobType?: string; limit: number }): Promise<JobListing[]> {
  let query = db.selectFrom('job').selectAll().orderBy('id', 'desc').limit(filter.limit);
  if (filter.jobType !== undefined) query = query.where('job_type', '=', filter.jobType);
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
  }));
}
