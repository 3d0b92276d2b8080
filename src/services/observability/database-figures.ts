import type { LivenessLocks } from '../../database/liveness-locks.ts';
import type { Stores } from '../../storage/index.ts';
import type { WaitingWorkCounts } from '../../storage/count-waiting-work.ts';
import type { LivenessThresholds } from '../jobs/job-liveness.ts';
import { readQueueCoverage, unservedWork, type UnservedWork } from '../jobs/queue-coverage.ts';

/** What the database gauges show: waiting work, and the work in queues no live daemon serves. */
export interface DatabaseFigures extends WaitingWorkCounts {
  readonly unservedWork: readonly UnservedWork[];
}

/** The database gauges' figures, read in one go (at most once a second, by the gauges). */
export async function readDatabaseFigures(
  storage: Pick<Stores, 'maintenance' | 'jobs'>,
  locks: LivenessLocks,
  thresholds: LivenessThresholds,
): Promise<DatabaseFigures> {
  const [counts, coverage] = await Promise.all([storage.maintenance.countWaitingWork(), readQueueCoverage(storage, locks, thresholds, Date.now())]);
  return { ...counts, unservedWork: unservedWork(coverage) };
}
