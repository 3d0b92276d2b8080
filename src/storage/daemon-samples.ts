import { fromDbTime, toDbTime } from '../database/schema.ts';
import type { StorageContext } from './context.ts';

/** A daemon's figures at one moment, as the charts read them. */
export interface DaemonSample {
  readonly jobId: number;
  readonly jobType: string;
  /** Epoch ms. */
  readonly at: number;
  readonly figures: Readonly<Record<string, number>>;
}

/** Records a daemon's figures now; deletes every daemon's samples from before `pruneBefore` (epoch ms) when given. */
export async function recordDaemonSample(
  { db }: StorageContext,
  sample: { readonly jobId: number; readonly jobType: string; readonly figures: Readonly<Record<string, number>> },
  now: number,
  pruneBefore?: number,
): Promise<void> {
  await db
    .insertInto('daemon_sample')
    .values({ job_id: sample.jobId, job_type: sample.jobType, at: toDbTime(now), figures: JSON.stringify(sample.figures) })
    .execute();
  if (pruneBefore !== undefined) await db.deleteFrom('daemon_sample').where('at', '<', toDbTime(pruneBefore)).execute();
}

/** Every daemon's samples since `since` (epoch ms), by daemon, oldest first; at most `limit`. */
export async function listDaemonSamples({ db }: StorageContext, since: number, limit: number): Promise<DaemonSample[]> {
  const rows = await db
    .selectFrom('daemon_sample')
    .select(['job_id', 'job_type', 'at', 'figures'])
    .where('at', '>=', toDbTime(since))
    .orderBy('job_id')
    .orderBy('at')
    .limit(limit)
    .execute();
  return rows.map((row) => ({ jobId: row.job_id, jobType: row.job_type, at: fromDbTime(row.at), figures: JSON.parse(row.figures) as Record<string, number> }));
}
