import { toDbTime, TRIGGERER_JOB_TYPE } from '../db/schema.ts';
import type { StorageContext } from './context.ts';

/**
 * Unowns the triggers of triggerers that are not alive, so any live triggerer may claim them.
 * Alive means: state running, no end date, and a heartbeat newer than `aliveSince`.
 * Idempotent; every triggerer runs it each pass.
 */
export async function releaseTriggersOfDeadTriggerers({ db }: StorageContext, aliveSince: number): Promise<number> {
  const deadJobs = db
    .selectFrom('job')
    .select('id')
    .where('job_type', '=', TRIGGERER_JOB_TYPE)
    .where((eb) =>
      eb.or([eb('state', '!=', 'running'), eb('end_date', 'is not', null), eb('latest_heartbeat', '<', toDbTime(aliveSince))]),
    );
  const result = await db
    .updateTable('trigger')
    .set({ triggerer_id: null })
    .where('triggerer_id', 'in', deadJobs)
    .executeTakeFirst();
  return Number(result.numUpdatedRows);
}

/**
 * Unowns the triggers whose owner has no job row at all (the job table was pruned, or the row
 * deleted by hand): an owner that does not exist is dead too, and nothing else would ever release
 * them. It reads every owned trigger, so triggerers run it with the periodic cleanup, not each pass.
 */
export async function releaseTriggersOfMissingTriggerers({ db }: StorageContext): Promise<number> {
  const result = await db
    .updateTable('trigger')
    .set({ triggerer_id: null })
    .where('triggerer_id', 'is not', null)
    .where(({ not, exists, selectFrom }) => not(exists(selectFrom('job').select('job.id').whereRef('job.id', '=', 'trigger.triggerer_id'))))
    .executeTakeFirst();
  return Number(result.numUpdatedRows);
}
