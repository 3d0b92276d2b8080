import { toDbTime, TRIGGERER_JOB_TYPE } from '../database/schema.ts';
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
    .where((eb) => eb.or([eb('state', '!=', 'running'), eb('end_date', 'is not', null), eb('latest_heartbeat', '<', toDbTime(aliveSince))]));
  const result = await db.updateTable('trigger').set({ triggerer_id: null }).where('triggerer_id', 'in', deadJobs).executeTakeFirst();
  return Number(result.numUpdatedRows);
}

/**
 * Unowns the triggers whose owner has no job row at all (the job table was pruned, or the row
 * deleted by hand): an owner that does not exist is dead too, and nothing else would ever release
 * them. The owners are found with one index seek each (a loose index scan: there are a few
 * owners, and up to 100,000 owned rows that a plain NOT EXISTS would visit one by one, holding
 * SQLite's synchronous connection the while); triggerers run it with the periodic cleanup.
 */
export async function releaseTriggersOfMissingTriggerers({ db, adapter }: StorageContext): Promise<number> {
  const owners: number[] = [];
  for (let after = -1; owners.length < MAX_OWNERS; ) {
    const next = await db.selectFrom('trigger').select('triggerer_id').where('triggerer_id', '>', after).orderBy('triggerer_id').limit(1).executeTakeFirst();
    if (!next || next.triggerer_id === null) break;
    owners.push(next.triggerer_id);
    after = next.triggerer_id;
  }
  if (owners.length === 0) return 0;
  const existing = new Set((await db.selectFrom('job').select('id').where(adapter.idIn('id', owners)).execute()).map((job) => job.id));
  const missing = owners.filter((owner) => !existing.has(owner));
  if (missing.length === 0) return 0;
  const result = await db.updateTable('trigger').set({ triggerer_id: null }).where(adapter.idIn('triggerer_id', missing)).executeTakeFirst();
  return Number(result.numUpdatedRows);
}

/** Distinct owners looked at per cleanup; more than this many triggerers is far past any deployment. */
const MAX_OWNERS = 10_000;
